// doctest's main, compiled once and linked into the test executables of tests/, tests/plan
// and tests/hier.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
