// The one exception the data plane throws; the bindings turn it into Python's
// NativeCommError (arborcc.runtime wraps that in arborcc's error hierarchy).
#pragma once

#include <stdexcept>

namespace dataplane {

class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace dataplane
