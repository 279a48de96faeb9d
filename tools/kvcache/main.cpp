// kvcache: plan, check and inspect KV caches from the command line.
#include "app.hpp"

int main(int argc, char** argv) {
  kvcache::tool::Globals globals;
  const auto app = kvcache::tool::make_app(globals);
  return kvcache::tool::run(*app, argc, argv);
}
