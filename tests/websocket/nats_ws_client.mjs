// The NATS JavaScript client (@nats-io/nats-core's wsconnect, as in a browser) against a
// server's WebSocket port: publishes, subscribes, request/reply; prints what it saw as JSON.
// Usage: node --experimental-websocket nats_ws_client.mjs ws://host:port [user] [pass]
import { wsconnect } from "@nats-io/nats-core";

const [url, user, pass] = process.argv.slice(2);
const out = {};
try {
  const nc = await wsconnect({ servers: url, user, pass, timeout: 5000 });
  out.port = nc.info.port;
  const sizes = [0, 1, 100, 4096, 70000, 300000];
  const sub = nc.subscribe("ws.data.>");
  const received = [];
  const done = (async () => {
    for await (const m of sub) {
      received.push([m.subject, m.data.length, m.data.every((b, i) => b === i % 251)]);
      if (received.length === sizes.length) break;
    }
  })();
  nc.subscribe("ws.echo", { callback: (_err, m) => m.respond(m.data) });
  await nc.flush();
  for (const n of sizes) {
    nc.publish(`ws.data.${n}`, Uint8Array.from({ length: n }, (_, i) => i % 251));
  }
  await done;
  out.received = received;
  const reply = await nc.request("ws.echo", new TextEncoder().encode("ping"), { timeout: 5000 });
  out.reply = new TextDecoder().decode(reply.data);
  out.tcp = [];
  const tcpSub = nc.subscribe("ws.from.tcp", { max: 1 });
  await nc.flush();
  console.log(JSON.stringify({ ready: true }));
  for await (const m of tcpSub) out.tcp.push(new TextDecoder().decode(m.data));
  await nc.drain();
} catch (err) {
  out.error = String(err.code ?? err.message ?? err);
}
console.log(JSON.stringify(out));
