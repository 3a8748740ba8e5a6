'use strict';
// The application of observe.test.js's OpenTelemetry case. With no SDK set
// up the binding's spans are no-ops (nothing recorded, locks work); with a
// BasicTracerProvider and an InMemorySpanExporter registered, an acquire, a
// busy try and a hold are spans. Prints the finished spans as JSON.
const api = require('@opentelemetry/api');
const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { Client } = require(process.env.RLC_NODE_BINDING);

const uri = process.env.RLC_TEST_REDIS;
const name = `node-otel-${process.pid}-${Date.now()}`;

async function main() {
  // A process that waits only for 'lost' keeps itself alive (README).
  const alive = setInterval(() => {}, 1000);
  const client = new Client(uri, { fencing: true }); // the hold spans carry the token
  // No SDK: the global tracer is a no-op one.
  const before = client.lock(`${name}-nosdk`);
  if (!(await before.acquire({ wait: 0 }))) throw new Error('acquire without an SDK failed');
  await before.release();
  before.close();

  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  api.trace.setGlobalTracerProvider(provider);
  const noSdk = exporter.getFinishedSpans().length;

  const mine = client.lock(name);
  const other = client.lock(name);
  await mine.acquire({ wait: 1000 });
  await other.acquire({ wait: 0 });
  await mine.release();
  const short = client.lock(`${name}-fixed`);
  const gone = new Promise((r) => short.once('lost', r));
  await short.acquire({ lease: 150 });
  await gone;
  mine.close(); other.close(); short.close();
  await client.close();
  await provider.forceFlush();
  clearInterval(alive);
  const spans = exporter.getFinishedSpans().map((s) => ({
    name: s.name, attributes: s.attributes, status: s.status.code, events: s.events.map((e) => e.name),
  }));
  console.log(JSON.stringify({ noSdk, spans }));
}

main().catch((e) => { console.error(e); process.exit(1); });
