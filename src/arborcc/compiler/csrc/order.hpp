// The global order's FIFO checks and repair (arborcc.compiler.order, GC3 section 5.2
// step 4): FIFO consistency and slot safety of an order, the dependency graph of the
// alive instructions, and the three scheduling attempts of the repair.
#pragma once

#include <optional>

#include "pyints.hpp"
#include "table.hpp"

namespace compiler {

//: messages per rank pair a repaired order may keep in flight (order.SAFE_SLOTS)
constexpr int64_t SAFE_SLOTS = 2;

struct Messages {  // every alive sender's message, and its pair (sender, receiver, lane)
  Ints sender, receiver, pair;
  int64_t npairs = 0;
};

Messages messages(const Table& t);

// The alive instructions sorted by dependency depth, then reverse depth (larger first;
// rdepth may be empty: all zero), then index: GC3's priority order.
Ints global_order(const Ints& alive, const Ints& depth, const Ints& rdepth);

bool fifo_consistent(const Table& t, const Ints& order);
bool slot_safe(const Table& t, const Ints& order, int64_t slots);

struct KahnFifo {
  std::optional<Ints> order;
  Ints blocked;  // sends held back for a slot when it got stuck
  Ints waiting;  // ready receives whose message was not at its pair's head
};

// The fused instructions a failed kahn_fifo was stuck at: those held back for a slot,
// then those whose message was not at its pair's head (in the order fused).
Ints stuck_fusions(const KahnFifo& r, const Table& t);

class OrderGraph {
 public:
  // Successors and in-degrees of the instructions of `order` (data dependencies through
  // the alias map, and each receive after its send), and the messages' pairs.
  OrderGraph(const Table& t, const Ints& order, const Rows& preds);

  // Kahn's algorithm in priority order with each pair's sends, and its receives, chained
  // in priority order (by_priority) or program order; none if stuck or not slot-safe.
  std::optional<Ints> kahn(const Ints& order, bool by_priority) const;
  // Kahn's algorithm keeping each pair's messages FIFO and within SAFE_SLOTS as it goes.
  KahnFifo kahn_fifo(const Ints& order) const;
  // Whether kahn_fifo(order) would return order itself.
  bool fifo_schedule(const Ints& order) const;
  // The instructions of `order` in program (index) order.
  Ints program_order(const Ints& order) const;

 private:
  Ints positions(const Ints& order, int64_t missing) const;

  size_t n_;
  Rows succs_;
  Ints indeg_, msg_out_;
  Messages msgs_;
  Ints sends_on_, receives_on_;  // per instruction: pair of the message it sends / receives
  Ints message_of_;              // per instruction: the message it sends (-1: none)
};

}  // namespace compiler
