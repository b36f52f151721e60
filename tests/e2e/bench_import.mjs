// Times the import of Llama 3 8B's Paddle program (tests/models/llama3_8b.pir, 3,615 ops at
// its published size) in the browser, planned under dp=8,tp=8: through the playground's
// import box (until the banner says it is imported and the plan is drawn) and through the
// JavaScript API (`import_model`, then `plan` of its text: every stage). The 2-layer
// program is the baseline in the same browser. docs/benchmarks.md. Not a test: run by hand
// after a release build, `node tests/e2e/bench_import.mjs`.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { serveDist, launchBrowser } from './harness.mjs';

const model = (name) => fileURLToPath(new URL(`../models/${name}`, import.meta.url));
const server = await serveDist();
const browser = await launchBrowser();
try {
  for (let i = 0; i < 3; i++) {
    for (const [file, spec] of [['llama3_8b.pir', 'dp=8,tp=8'], ['llama_causal_2l.pir', 'dp=2,tp=2']]) {
      const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
      await page.goto(server.url + '#s=dp_mlp');
      await page.waitForSelector('.mesh-view svg', { timeout: 60000 });
      await page.fill('#import-parallel', spec);
      const t0 = Date.now();
      await page.setInputFiles('#import-file', model(file));
      await page.waitForFunction(() => document.querySelector('.banner')?.textContent.startsWith('Imported'), null, { timeout: 120000 });
      await page.waitForSelector('.mesh-view svg');
      const shown = Date.now() - t0;
      const api = await browser.newPage();
      await api.goto(server.url + 'api.html');
      const text = readFileSync(model(file), 'utf8');
      const times = await api.evaluate(async ([text, spec]) => {
        const { default: init, import_model, plan } = await import('./shardlab-engine.js');
        await init({ module_or_path: './shardlab-engine_bg.wasm' });
        const t0 = performance.now();
        const imported = import_model(new TextEncoder().encode(text), { parallel: spec });
        const t1 = performance.now();
        const out = plan({ text: imported.text });
        const t2 = performance.now();
        return { import: t1 - t0, plan: t2 - t1, ranks: out.ranks.length };
      }, [text, spec]);
      console.log(`${file} under ${spec}: playground ${shown} ms to the drawn plan; API import ${times.import.toFixed(0)} ms, plan (every stage, ${times.ranks} ranks) ${times.plan.toFixed(0)} ms`);
      await page.close();
      await api.close();
    }
  }
} finally {
  await browser.close();
  server.close();
}
