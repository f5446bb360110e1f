-- A read: the same request over and over (wrk pre-builds it once, so the client stays cheap).
-- Arguments after `--`: PATH, then any number of "Name: value" header lines.
-- done() prints one line `BENCH_JSON {...}` with throughput, latency percentiles and errors;
-- statuses above 399 are counted by wrk itself (summary.errors.status).

function init(args)
  wrk.method = "GET"
  wrk.path = args[1]
  wrk.body = nil
  for i = 2, #args do
    local name, value = args[i]:match("^([^:]+):%s*(.*)$")
    wrk.headers[name] = value
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"min":%d,"mean":%.1f,"p50":%d,"p90":%d,"p99":%d,"p999":%d,"max":%d},' ..
    '"statuses":null}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9), latency.max))
end
