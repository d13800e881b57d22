const { spawn } = require('child_process');
const fs = require('fs'); const os = require('os'); const path = require('path');
// Measures the capture core in the real browser: loads dist/chrome into headless Chromium, waits for the worker,
// and runs its __personkitBench(n) hook (the same 4 KB turn as shared/benches/capture_turn.rs) three times.
// Usage: node extension/tools/bench-worker.js dist/chrome   (no npm dependencies; CDP over --remote-debugging-pipe)
const ext = path.resolve(process.argv[2] || "dist/chrome");
const home = fs.mkdtempSync(path.join(os.tmpdir(), 'pkb-'));
const chrome = spawn('/usr/lib/chromium/chromium', ['--headless=new','--no-sandbox','--disable-gpu','--no-first-run',
  '--disable-background-networking','--disable-component-update','--disable-sync','--disable-dev-shm-usage',
  `--user-data-dir=${home}/ud`, `--disable-extensions-except=${ext}`, `--load-extension=${ext}`, '--remote-debugging-pipe', 'about:blank'],
  { stdio: ['ignore', 'ignore', 'ignore', 'pipe', 'pipe'], env: { ...process.env, HOME: home } });
const out = chrome.stdio[3], inp = chrome.stdio[4];
let id = 0; const pending = new Map(); let buf = '';
inp.on('data', (d) => { buf += d.toString(); let i; while ((i = buf.indexOf('\0')) >= 0) { const m = JSON.parse(buf.slice(0, i)); buf = buf.slice(i + 1); if (m.id && pending.has(m.id)) { pending.get(m.id)(m); pending.delete(m.id); } } });
const send = (method, params = {}, sessionId) => new Promise((res) => { const i = ++id; pending.set(i, res); out.write(JSON.stringify({ id: i, method, params, sessionId }) + '\0'); });
(async () => {
  let sw;
  for (let k = 0; k < 50 && !sw; k++) { const t = await send('Target.getTargets'); sw = t.result.targetInfos.find((x) => x.type === 'service_worker'); if (!sw) await new Promise((r) => setTimeout(r, 200)); }
  const a = await send('Target.attachToTarget', { targetId: sw.targetId, flatten: true });
  const s = a.result.sessionId;
  await new Promise((r) => setTimeout(r, 1500)); for (const n of [50, 300, 300]) {
    const r = await send('Runtime.evaluate', { expression: `__personkitBench(${n})`, awaitPromise: true, returnByValue: true }, s);
    console.log(JSON.stringify(r.result.result.value || r.result));
  }
  const d = await send('Runtime.evaluate', { expression: `__personkitDebug()`, awaitPromise: true, returnByValue: true }, s);
  console.log('debug', JSON.stringify(d.result.result.value));
  chrome.once('exit', () => {
    try { fs.rmSync(home, { recursive: true, force: true }); } catch { /* best effort */ }
    process.exit(0);
  });
  chrome.kill();
})();
setTimeout(() => { console.log('timeout'); chrome.kill(); process.exit(1); }, 60000);
