-- A write: every request is built afresh so that names and property values are unique.
-- Arguments after `--`: METHOD, PATH, BODY, NONCE, then "Name: value" header lines.
-- In PATH and BODY, "{t}" becomes the wrk thread's index (0, 1, ...; with -t8 -c8 each
-- connection has its own thread, so "{t}" gives each writer its own table) and "{n}" becomes
-- a value unique in the whole run: NONCE_t_counter.
-- response() counts every status code; done() prints one line `BENCH_JSON {...}`.

local threads = {}
local next_index = 0

function setup(thread)
  thread:set("index", next_index)
  next_index = next_index + 1
  table.insert(threads, thread)
end

local method, path, body, nonce
local counter = 0
statuses = {}

function init(args)
  method, path, body, nonce = args[1], args[2], args[3], args[4]
  path = path:gsub("{t}", tostring(index))
  body = body:gsub("{t}", tostring(index))
  for i = 5, #args do
    local name, value = args[i]:match("^([^:]+):%s*(.*)$")
    wrk.headers[name] = value
  end
end

function request()
  counter = counter + 1
  local unique = nonce .. "_" .. index .. "_" .. counter
  return wrk.format(method, path:gsub("{n}", unique), nil, (body:gsub("{n}", unique)))
end

function response(status, headers, response_body)
  local key = tostring(status)
  statuses[key] = (statuses[key] or 0) + 1
end

function done(summary, latency, requests)
  local merged = {}
  for _, thread in ipairs(threads) do
    local counts = thread:get("statuses")
    for code, count in pairs(counts) do
      merged[code] = (merged[code] or 0) + count
    end
  end
  local parts = {}
  for code, count in pairs(merged) do
    table.insert(parts, string.format('"%s":%d', code, count))
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"min":%d,"mean":%.1f,"p50":%d,"p90":%d,"p99":%d,"p999":%d,"max":%d},' ..
    '"statuses":{%s}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9), latency.max, table.concat(parts, ",")))
end
