// A server of a test's own (redis-server, memcached) on a free loopback port, gone with the
// object: no disk, no daemon left behind. When its program is not installed, available() is false
// and why() says so (tools/install-deps.sh installs both), so tests skip with that message.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace kvcache::testing {

class LocalServer {
 public:
  ~LocalServer() { kill(); }
  LocalServer(const LocalServer&) = delete;
  LocalServer& operator=(const LocalServer&) = delete;

  bool available() const { return why_.empty(); }
  bool running() const { return pid_ > 0; }
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
  // Sends `text` on a new connection and returns what the server answers until it closes it or
  // 2 s pass (the text should end with the protocol's quit).
  std::string request(const std::string& text) const {
    const int s = connected();
    if (s < 0) return "";
    (void)::send(s, text.data(), text.size(), 0);
    timeval wait{2, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
    std::string out;
    char buffer[4096];
    for (ssize_t n; (n = ::recv(s, buffer, sizeof buffer, 0)) > 0;) out.append(buffer, n);
    close(s);
    return out;
  }

 protected:
  // Starts `program` with args (the port given by `args_for`), and waits up to 5 s for
  // `ready(port)` (null: until the port takes a connection).
  LocalServer(const std::string& program,
              const std::function<std::vector<std::string>(int port)>& args_for,
              const std::function<bool(int port)>& ready) {
    if (std::system(("command -v " + program + " > /dev/null 2>&1").c_str()) != 0) {
      why_ = program + " is not installed (tools/install-deps.sh installs it)";
      return;
    }
    port_ = free_port();
    std::vector<std::string> args = args_for(port_);
    args.insert(args.begin(), program);
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp(program.c_str(), argv.data());
      _exit(127);
    }
    const auto up = [&] { return ready ? ready(port_) : connected_once(); };
    for (int i = 0; i < 100 && !up(); ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        why_ = program + " ended at once (its message above)";
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!up()) why_ = program + " did not answer on port " + std::to_string(port_);
  }

 private:
  // A free port p (the system's choice), with p + 10000 free too and at most 55535: a Redis
  // Cluster node talks to its peers on p + 10000.
  static int free_port() {
    for (int i = 0; i < 100; ++i) {
      const int p = bound_port(0);
      if (p <= 55535 && bound_port(p + 10000) == p + 10000) return p;
    }
    return bound_port(0);
  }
  // Binds a socket to `port` (0: any free one) and closes it: the port, or -1 when taken.
  static int bound_port(int port) {
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    int got = -1;
    if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      socklen_t n = sizeof a;
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
      got = ntohs(a.sin_port);
    }
    close(s);
    return got;
  }
  // A connection to the server, or -1.
  int connected() const {
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port_));
    if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      close(s);
      return -1;
    }
    return s;
  }
  bool connected_once() const {
    const int s = connected();
    if (s >= 0) close(s);
    return s >= 0;
  }

  std::string why_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace kvcache::testing
