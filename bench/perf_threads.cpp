// allreduce_perf's measurement loop instantiated for the threads transport.
#include <tcoll/transport/threads.hpp>

#include "common/perf_entry.hpp"
#include "common/perf_runner.hpp"

void tcoll::bench::run_all_threads(thread_transport& t, const perf_options& o,
                                   std::vector<row>& rows) {
  run_all(t, o, "threads", rows);
}
