// doctest's main, compiled once and linked into the test executables of tests/, tests/plan,
// tests/hier and tests/hybrid. Each of those folders builds one executable from its
// in-process test files (one unity translation unit: the headers are parsed and the shared
// templates instantiated once, not once per file), and each meson test runs it on one file's
// cases with `--source-file=*/<file>`. A filter that matches no case fails the run: a
// renamed file must not turn its test into one that passes without running anything.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

namespace {

/// The number of test cases that passed the command line's filters in the last run.
unsigned cases_passing_filters = 0;

/// Reads that number at the end of the run; reports nothing.
struct case_counter : doctest::IReporter {
  explicit case_counter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override {
    cases_passing_filters = s.numTestCasesPassingFilters;
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("case_counter", 1, case_counter);

} // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit()) return result; // --help, --list-test-cases, ...
  if (result == 0 && cases_passing_filters == 0) {
    std::fprintf(stderr, "doctest_main: no test case matches the filters given\n");
    return 1;
  }
  return result;
}
