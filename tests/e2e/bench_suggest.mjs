// Times the auto-planner in headless Chromium on the release build in dist/: `suggest`
// from the JavaScript API on the cases of `shardlab bench --what suggest`, median of REPEAT
// runs, beside one costing of the winner (`bench_cost`: planned and priced, no JSON; the
// baseline, in the same page).
// Run by scripts/bench_suggest.sh.
import { serveDist, launchBrowser } from './harness.mjs';

const repeat = Number(process.env.REPEAT ?? 3);
const cases = [
  ['gpt 24 layers, batch 64, h100x8 (8)', { model: 'gpt', layers: 24, batch: 64, devices: 8, topology: 'h100x8' }],
  ['gpt 24 layers, batch 64, h100x8x8 (64)', { model: 'gpt', layers: 24, batch: 64, devices: 64, topology: 'h100x8x8' }],
  ['embedding_lm GPT-3 1.3B, h100x8 (8)', {
    model: 'embedding_lm', layers: 24, hidden: 2048, heads: 16, seq: 2048, vocab: 50304,
    batch: 512, devices: 8, topology: 'h100x8',
  }],
];
const server = await serveDist();
const browser = await launchBrowser();
try {
  const page = await browser.newPage();
  await page.goto(`${server.url}api.html`);
  console.log(`suggest in headless Chromium, release wasm, one thread, median of ${repeat}`);
  console.log('case                                             search  one costing    ratio');
  for (const [name, req] of cases) {
    const r = await page.evaluate(
      async ([req, repeat]) => {
        const m = await import('./shardlab-engine.js');
        await m.default();
        const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
        const doc = m.suggest(req); // warm-up (compiles the module's hot code)
        const search = [];
        const cost = [];
        for (let i = 0; i < repeat; i++) {
          let t = performance.now();
          m.suggest(req);
          search.push(performance.now() - t);
          cost.push(m.bench_cost(doc.plan, req.topology, 1));
        }
        return { search: median(search), cost: median(cost) };
      },
      [req, repeat],
    );
    const ms = (x) => `${x.toFixed(0)}ms`;
    console.log(`${name.padEnd(44)} ${ms(r.search).padStart(9)} ${ms(r.cost).padStart(12)} ${(r.search / r.cost).toFixed(1).padStart(7)}x`);
  }
} finally {
  await browser.close();
  server.close();
}
