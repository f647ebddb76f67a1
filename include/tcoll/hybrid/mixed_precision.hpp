#pragma once
/// \file
/// Moved to `tcoll/compress/mixed_precision.hpp` (wire formats are the compress adaptor's);
/// this header forwards there for code written against the old path.
#include "../compress/mixed_precision.hpp"
