// A redis-server of a test's own (see local_server.hpp), with redis-cli to talk to it.
#pragma once

#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include "local_server.hpp"

namespace kvcache::testing {

class RedisServer : public LocalServer {
 public:
  explicit RedisServer(std::vector<std::string> extra = {})
      : LocalServer(
            "redis-server",
            [&extra](int port) {
              std::vector<std::string> args{"--port",       std::to_string(port),
                                            "--bind",       "127.0.0.1",
                                            "--save",       "",
                                            "--appendonly", "no",
                                            "--daemonize",  "no",
                                            "--loglevel",   "warning"};
              args.insert(args.end(), extra.begin(), extra.end());
              return args;
            },
            [](int port) { return cli_on(port, "PING").rfind("PONG", 0) == 0; }) {}

  // redis-cli's output for `args` (each quoted for the shell by the caller).
  std::string cli(const std::string& args) const { return cli_on(port(), args); }

 private:
  static std::string cli_on(int port, const std::string& args) {
    const std::string command = "redis-cli -p " + std::to_string(port) + " " + args + " 2>&1";
    std::string out;
    if (FILE* p = popen(command.c_str(), "r")) {
      std::array<char, 4096> buffer;
      while (std::fgets(buffer.data(), buffer.size(), p) != nullptr) out += buffer.data();
      pclose(p);
    }
    return out;
  }
};

}  // namespace kvcache::testing
