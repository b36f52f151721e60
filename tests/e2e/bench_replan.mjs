// Times the playground's re-plan in headless Chromium on the release build in dist/:
// `bench_replan` from the JavaScript API on the benchmark's gpt (dp x Megatron mp on [2, 4])
// at each layer count given, median of REPEAT runs. Run by scripts/bench_replan.sh.
import { readFile } from 'node:fs/promises';
import { serveDist, launchBrowser } from './harness.mjs';

const [planDir, ...layers] = process.argv.slice(2);
const repeat = Number(process.env.REPEAT ?? 31);
const server = await serveDist();
const browser = await launchBrowser();
try {
  const page = await browser.newPage();
  await page.goto(`${server.url}api.html`);
  console.log(`re-plan after one annotation change, headless Chromium, release wasm, median of ${repeat}`);
  console.log('layers  replan (1 rank)  completion  all 8 ranks  timeline step  select tensor');
  const texts = {};
  for (const n of layers) texts[n] = await readFile(`${planDir}/gpt_${n}.plan`, 'utf8');
  // Warm up: the first runs include compiling the module to optimised code.
  await page.evaluate(
    async ([all]) => {
      const m = await import('./shardlab-engine.js');
      await m.default();
      for (const t of all) m.bench_replan(t, 5);
    },
    [Object.values(texts)],
  );
  for (const n of layers) {
    const text = texts[n];
    const r = await page.evaluate(
      async ([text, repeat]) => {
        const m = await import('./shardlab-engine.js');
        await m.default();
        return m.bench_replan(text, repeat);
      },
      [text, repeat],
    );
    const ms = (x) => `${x.toFixed(1)}ms`.padStart(10);
    console.log(`${String(n).padStart(6)}  ${ms(r.pipeline_ms).padStart(15)}  ${ms(r.completion_ms)}  ${ms(r.all_ranks_ms).padStart(11)}  ${ms(r.timeline_step_ms).padStart(13)}  ${ms(r.select_ms).padStart(13)}`);
  }
} finally {
  await browser.close();
  server.close();
}
