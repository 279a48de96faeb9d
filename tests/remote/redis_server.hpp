// A redis-server of a test's own, on a free loopback port, gone with the object: no disk, no
// daemon left behind. When redis-server is not installed, available() is false and why() says
// so (tools/install-deps.sh installs it), so tests skip with that message.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace kvcache::testing {

class RedisServer {
 public:
  explicit RedisServer(std::vector<std::string> extra = {}) {
    if (std::system("command -v redis-server > /dev/null 2>&1") != 0) {
      why_ = "redis-server is not installed (tools/install-deps.sh installs it)";
      return;
    }
    port_ = free_port();
    std::vector<std::string> args{
        "redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",  "--save", "",
        "--appendonly", "no",     "--daemonize",         "no",     "--loglevel", "warning"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp("redis-server", argv.data());
      _exit(127);
    }
    for (int i = 0; i < 100 && !answers(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!answers()) why_ = "redis-server did not answer on port " + std::to_string(port_);
  }
  ~RedisServer() { kill(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  bool available() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  int port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  // Ends the server at once, as a crash would.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // redis-cli's output for `args` (each quoted for the shell by the caller).
  std::string cli(const std::string& args) const {
    const std::string command = "redis-cli -p " + std::to_string(port_) + " " + args + " 2>&1";
    std::string out;
    if (FILE* p = popen(command.c_str(), "r")) {
      std::array<char, 4096> buffer;
      while (std::fgets(buffer.data(), buffer.size(), p) != nullptr) out += buffer.data();
      pclose(p);
    }
    return out;
  }

 private:
  static int free_port() {
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t n = sizeof a;
    getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
    close(s);
    return ntohs(a.sin_port);
  }
  bool answers() const { return cli("PING").rfind("PONG", 0) == 0; }

  std::string why_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace kvcache::testing
