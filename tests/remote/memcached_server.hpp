// A memcached of a test's own (see local_server.hpp): 64 MB, TCP only.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "local_server.hpp"

namespace kvcache::testing {

class MemcachedServer : public LocalServer {
 public:
  explicit MemcachedServer(std::vector<std::string> extra = {})
      : LocalServer(
            "memcached",
            [&extra](int port) {
              std::vector<std::string> args{
                  "-p", std::to_string(port), "-l", "127.0.0.1", "-U", "0", "-m", "64"};
              if (geteuid() == 0) args.insert(args.end(), {"-u", "root"});  // it refuses root else
              args.insert(args.end(), extra.begin(), extra.end());
              return args;
            },
            nullptr) {}

  // A counter of `stats` (curr_items, evictions, ...), or -1 when the server does not answer.
  long stat(const std::string& name) const {
    std::istringstream lines(request("stats\r\nquit\r\n"));
    for (std::string stat, key, value; lines >> stat >> key;) {
      if (stat != "STAT") break;
      lines >> value;
      if (key == name) return std::stol(value);
    }
    return -1;
  }
};

}  // namespace kvcache::testing
