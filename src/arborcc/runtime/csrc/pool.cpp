// The worker threads of a communicator (thread-per-thread-block mode, and the threads
// that split a shared-array collective's copies), and their per-thread bounce buffers.

#include "communicator.hpp"
#include "errors.hpp"

namespace dataplane {

void Communicator::on_pool(int nworkers, const std::function<void(int)>& work) {
  ensure_pool(nworkers);
  std::string first_error;
  std::mutex err_mu;
  int remaining = nworkers - 1;  // guarded by pool_mu_ (a count changed outside it could lose the last wake-up)
  auto job = [&](int w) {
    try {
      work(w);
    } catch (std::exception& e) {
      std::lock_guard<std::mutex> lk(err_mu);
      if (first_error.empty()) first_error = e.what();
      abort(e.what());
    }
  };
  {
    std::lock_guard<std::mutex> lk(pool_mu_);
    pool_job_ = [&](int w) {
      job(w);
      std::lock_guard<std::mutex> lk(pool_mu_);
      if (--remaining == 0) pool_done_cv_.notify_all();
    };
    pool_size_ = nworkers;
    ++pool_gen_;
  }
  pool_cv_.notify_all();
  job(0);
  {
    std::unique_lock<std::mutex> lk(pool_mu_);
    pool_done_cv_.wait(lk, [&] { return remaining == 0; });
    pool_job_ = nullptr;
  }
  if (!first_error.empty()) throw CommError(first_error);
}

std::vector<char>& Communicator::bounce_for(int w) {
  while ((int)bounces_.size() <= w) bounces_.emplace_back(std::vector<char>(256 * 1024));
  return bounces_[w];
}

void Communicator::ensure_pool(int nworkers) {
  bounce_for(nworkers);
  while ((int)pool_.size() < nworkers - 1) {
    int w = (int)pool_.size() + 1;
    pool_.emplace_back([this, w] {
      uint64_t seen = 0;
      for (;;) {
        std::function<void(int)> job;
        {
          std::unique_lock<std::mutex> lk(pool_mu_);
          pool_cv_.wait(lk, [&] { return pool_stop_ || (pool_gen_ != seen && w < pool_size_); });
          if (pool_stop_) return;
          seen = pool_gen_;
          job = pool_job_;
        }
        if (job) job(w);
      }
    });
  }
}

}  // namespace dataplane
