// page_harness.js BASE_URL INDEX_HTML: runs the script of sluice serve's page (src/serve/web/index.html)
// against a live server, in node with a minimal stand-in for the DOM: the models load, a chat turn
// streams in (SSE read and parsed by the page's own code), the engine view fills from /metrics, the
// heatmap is drawn from /experts, and a second turn sends the first one as history. Exit 0 when all of
// that happened. Used by tests/py/test_serve.py (skipped without node).
const vm = require("vm"), fs = require("fs");
const base = process.argv[2], html = fs.readFileSync(process.argv[3], "utf8");
const script = html.slice(html.indexOf("<script>") + 8, html.indexOf("</script>"));
function el(id) {
  const e = { id, value: "", textContent: "", innerHTML: "", className: "", hidden: false, disabled: false, children: [],
    style: {}, dataset: {}, options: [], scrollTop: 0, scrollHeight: 0, clientWidth: 300, width: 0, height: 0,
    appendChild(c) { this.children.push(c); if (c.value !== undefined && this.id === "model") { this.options.push(c); if (!this.value) this.value = c.value; } return c; },
    append(...cs) { cs.forEach(c => this.children.push(c)); },
    addEventListener(t, f) { this["on" + t] = f; },
    getContext() { return { clearRect() {}, beginPath() {}, moveTo() {}, lineTo() {}, stroke() {},
      createImageData(w, h) { return { data: new Uint8ClampedArray(w * h * 4), w, h }; },
      putImageData(img) { e.drawn = img; } }; } };
  return e;
}
const els = {};
["model", "key", "reset", "log", "prompt", "send", "stop", "system", "temp", "max", "think", "tps", "spark", "hit", "bpt", "aq",
 "io", "req", "gen", "read", "cache", "heat-title", "heat", "heat-note"].forEach(id => els[id] = el(id));
els.temp.value = "0"; els.max.value = "24";
Object.defineProperty(els.model, "innerHTML", { set(v) { this.options = []; this.value = ""; }, get() { return ""; } });
const ctx = { document: { getElementById: id => els[id], createElement: t => el(t), documentElement: {} },
  localStorage: { getItem() { return null; }, setItem() {} }, fetch: (u, o) => fetch(base + u, o), TextDecoder,
  performance, JSON, Math, console, setInterval() {}, getComputedStyle: () => ({ getPropertyValue: () => "#000" }),
  devicePixelRatio: 1, AbortController, encodeURIComponent, parseInt, parseFloat, Error, Promise, Uint8ClampedArray };
vm.createContext(ctx);
vm.runInContext(script, ctx);
(async () => {
  await new Promise(r => setTimeout(r, 300));
  if (els.model.value !== "demo") throw new Error("models not loaded: " + els.model.value);
  els.prompt.value = "Read me Ruth chapter 2.";
  await vm.runInContext("send()", ctx);
  const box = els.log.children[1], answer = box.children[1].textContent, meta = box.children[2].textContent;
  console.log("answer:", JSON.stringify(answer.slice(0, 60)), "| meta:", meta);
  // the page asks max_tokens 24: the answer's, besides the demo's 4-token thinking block (docs/SERVER.md, Thinking)
  if (answer.length < 10 || !/28 tokens/.test(meta) || !/length/.test(meta)) throw new Error("no streamed answer");
  if (box.dataset.state !== "done") throw new Error("answer's data-state: " + box.dataset.state);
  await vm.runInContext("poll()", ctx);
  await vm.runInContext("heat()", ctx);
  console.log("tps", els.tps.textContent, "hit", els.hit.textContent, "bpt", els.bpt.textContent, "aq", els.aq.textContent,
              "req", els.req.textContent, "gen", els.gen.textContent, "cache", els.cache.textContent, "|", els["heat-note"].textContent);
  if (!(parseInt(els.gen.textContent) >= 24) || !/%$/.test(els.hit.textContent) || !els.heat.drawn) throw new Error("engine view empty");
  // a second turn carries the first one
  els.prompt.value = "And chapter 3.";
  await vm.runInContext("send()", ctx);
  const meta2 = els.log.children[3].children[2].textContent;
  console.log("turn 2 meta:", meta2);
  const p2 = /(\d+) prompt/.exec(meta2);
  if (!p2 || !(parseInt(p2[1]) > 40)) throw new Error("history not sent");
  console.log("page ok");
})().catch(e => { console.error("FAIL", e); process.exit(1); });
