// Broken plugins are skipped with a precise reason while the host keeps working; `required`
// turns a skip into an error naming the plugin; objects keep their library alive.
#include <filesystem>
#include <map>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvcache/plugin_abi.h"
#include "kvcache/registry.hpp"
#include "test_plugins.hpp"

namespace kvcache {
namespace {

using ::testing::HasSubstr;
using testing::test_plugin;
using testing::test_plugin_settings;

std::map<std::string, std::string> reasons_by_file(const Registry& registry) {
  std::map<std::string, std::string> reasons;
  for (const RejectedPlugin& r : registry.rejected())
    reasons[r.file.filename().string()] = r.reason;
  return reasons;
}

TEST(PluginFaults, EachBrokenPluginIsSkippedWithItsReason) {
  const auto registry = Registry::load(test_plugin_settings());
  const auto reasons = reasons_by_file(*registry);
  EXPECT_THAT(reasons.at("kvcache-test-not-a-library.so"), HasSubstr("cannot load: "));
  EXPECT_THAT(reasons.at("kvcache-test-not-a-library.so"),
              HasSubstr("kvcache-test-not-a-library.so"));
  EXPECT_THAT(reasons.at("kvcache-test-no-entry.so"),
              HasSubstr("no entry function 'kvcache_plugin_entry' (not a kvcache plugin)"));
  EXPECT_EQ(reasons.at("kvcache-test-abi-mismatch.so"),
            "ABI major mismatch: plugin is built for ABI 99.0, this host implements ABI " +
                std::to_string(KVC_ABI_MAJOR) + "." + std::to_string(KVC_ABI_MINOR));
  EXPECT_EQ(reasons.at("kvcache-test-entry-throws.so"),
            "entry function threw an exception: boom: plugin initialisation failed");
  EXPECT_EQ(reasons.at("kvcache-test-entry-null.so"), "entry function returned no descriptor");
  EXPECT_EQ(reasons.at("kvcache-test-small-table.so"),
            "component #0 'truncated': function table is 8 bytes, ABI 1.0 needs " +
                std::to_string(sizeof(kvc_mask_table)));
  EXPECT_THAT(reasons.at("kvcache-test-missing-dependency.so"),
              HasSubstr("libkvcache_test_dependency.so: cannot open shared object file"));
  // The errno text that Boost.DLL appends is noise and must not reach users.
  for (const auto& [file, reason] : reasons)
    EXPECT_THAT(reason, ::testing::Not(HasSubstr("Bad file descriptor"))) << file;
  EXPECT_EQ(reasons.size(), 7u);
}

TEST(PluginFaults, HostKeepsWorkingAfterRejections) {
  const auto registry = Registry::load(test_plugin_settings());
  ASSERT_NE(registry->find(ComponentKind::mask, "test-mask"), nullptr);
  const auto mask = registry->create_mask("test-mask");
  EXPECT_EQ(mask->describe().max_ranges, 2u);
  // The in-tree masks next to libkvcache are found as well.
  EXPECT_NE(registry->find(ComponentKind::mask, "causal"), nullptr);
}

TEST(PluginFaults, RequiredBrokenPluginIsAnErrorNamingIt) {
  PluginSettings settings = test_plugin_settings();
  settings.required.push_back({"kvcache-test-abi-mismatch", {"my.yaml", 7, 13}});
  try {
    Registry::load(settings);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.diagnostics().size(), 1u);
    EXPECT_EQ(e.diagnostics()[0].where.line, 7);
    EXPECT_THAT(e.what(), HasSubstr("my.yaml:7:13"));
    EXPECT_THAT(e.what(),
                HasSubstr("required plugin 'kvcache-test-abi-mismatch' could not be loaded"));
    EXPECT_THAT(e.what(), HasSubstr("ABI major mismatch"));
  }
}

TEST(PluginFaults, RequiredPathThatFailsIsAnError) {
  PluginSettings settings;
  settings.paths.push_back({test_plugin("test-entry-null"), true, {"cfg.yaml", 3, 5}});
  EXPECT_THROW(
      {
        try {
          Registry::load(settings);
        } catch (const ConfigError& e) {
          EXPECT_THAT(e.what(), HasSubstr("returned no descriptor"));
          throw;
        }
      },
      ConfigError);
}

TEST(PluginFaults, RequiredPluginThatLoadsIsFine) {
  PluginSettings settings = test_plugin_settings();
  settings.required.push_back({"test-roundtrip", {}});             // by plugin name
  settings.required.push_back({"kvcache-test-roundtrip.so", {}});  // by file name
  EXPECT_NO_THROW(Registry::load(settings));
}

TEST(PluginFaults, RequiredFolderNeedsOneWorkingPlugin) {
  PluginSettings settings;
  settings.paths.push_back({KVCACHE_TEST_PLUGIN_DIR, true, {}});
  EXPECT_NO_THROW(Registry::load(settings));  // the round-trip plugin loads from it
  const auto empty = std::filesystem::temp_directory_path() / "kvcache-empty-plugin-folder";
  std::filesystem::create_directories(empty);
  settings.paths = {{empty.string(), true, {"f.yaml", 2, 3}}};
  try {
    Registry::load(settings);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("required plugin folder"));
    EXPECT_THAT(e.what(), HasSubstr("gave no plugin"));
  }
}

TEST(PluginFaults, RequiredPluginNowhereToBeFound) {
  PluginSettings settings;
  settings.required.push_back({"kvcache-metal", {"c.yaml", 2, 1}});
  try {
    Registry::load(settings);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("required plugin 'kvcache-metal' was not found"));
  }
}

TEST(PluginFaults, MissingForcedFileIsRejected) {
  PluginSettings settings;
  settings.paths.push_back({"/nonexistent/kvcache-nothing.so", false, {}});
  const auto registry = Registry::load(settings);
  ASSERT_EQ(registry->rejected().size(), 1u);
  EXPECT_EQ(registry->rejected()[0].reason, "no such file");
}

TEST(PluginFaults, ObjectsKeepTheirLibraryAlive) {
  PluginSettings settings;
  settings.paths.push_back({test_plugin("test-roundtrip"), true, {}});
  auto registry = Registry::load(settings);
  auto mask = registry->create_mask("test-mask");
  registry.reset();  // the registry and its library handles are gone; the mask still holds one
  const std::vector<Position> q{5};
  std::vector<PositionRange> ranges(2);
  std::vector<std::uint32_t> counts(1);
  mask->visible(q, ranges, counts);
  EXPECT_EQ(counts[0], 2u);
  EXPECT_EQ(ranges[1], (PositionRange{5, 6}));
}

TEST(PluginFaults, SameFileTwiceLoadsOnceAndCopiesAreShadowed) {
  const auto dir = std::filesystem::temp_directory_path() / "kvcache-shadow-test";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(test_plugin("test-roundtrip"), dir / "kvcache-copy.so",
                             std::filesystem::copy_options::overwrite_existing);
  PluginSettings settings;
  settings.paths.push_back({test_plugin("test-roundtrip"), false, {}});
  settings.env_paths = {test_plugin("test-roundtrip"), dir.string()};
  const auto registry = Registry::load(settings);
  int originals = 0;
  int shadowed = 0;
  for (const ComponentInfo& c : registry->components()) {
    if (c.name != "test-mask") continue;
    (c.shadowed_by.empty() ? originals : shadowed)++;
    if (!c.shadowed_by.empty()) {
      EXPECT_EQ(c.shadowed_by, test_plugin("test-roundtrip"));
    }
  }
  EXPECT_EQ(originals, 1);
  EXPECT_EQ(shadowed, 1);
  std::filesystem::remove_all(dir);
}

TEST(PluginFaults, SearchPlanFollowsTheDesignOrder) {
  PluginSettings settings;
  settings.paths.push_back({KVCACHE_TEST_PLUGIN_DIR, false, {}});
  settings.paths.push_back({"plugins/kvcache-x.so", false, {"/etc/kvcache/config.yaml", 4, 3}});
  settings.env_paths = {"/opt/a"};
  const SearchPlan plan = Registry::search_plan(settings);
  ASSERT_EQ(plan.forced_files.size(), 1u);
  // Relative to the config file, never to the current directory.
  EXPECT_EQ(plan.forced_files[0], "/etc/kvcache/plugins/kvcache-x.so");
  ASSERT_EQ(plan.config_dirs.size(), 1u);
  EXPECT_EQ(plan.env_entries, std::vector<std::filesystem::path>{"/opt/a"});
  EXPECT_TRUE(std::filesystem::exists(plan.library_dir / "kvcache-masks.so"));
}

}  // namespace
}  // namespace kvcache
