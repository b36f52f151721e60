// Times the playground's first load at real size (the default, GPT-3 13B) against the toy
// Megatron MLP as the baseline, alternating in one browser, and a Run of each (the real
// size runs its shrunk twin). docs/benchmarks.md. Not a test: run by hand after a release
// build, `node tests/e2e/bench_open.mjs`.
import { serveDist, launchBrowser } from './harness.mjs';

const server = await serveDist();
const browser = await launchBrowser();
try {
  for (let i = 0; i < 3; i++) {
    for (const [name, hash] of [['gpt3-13b (default)', ''], ['megatron_mlp (toy)', '#s=megatron_mlp']]) {
      const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
      const t0 = Date.now();
      await page.goto(server.url + hash);
      await page.waitForSelector('.mesh-view svg', { timeout: 60000 });
      const drawn = Date.now() - t0;
      await page.waitForFunction(() => document.querySelector('.cost-panel')?.textContent.includes('MFU'), null, { timeout: 60000 });
      const costed = Date.now() - t0;
      const t1 = Date.now();
      await page.click('#run');
      await page.waitForSelector('.run-panel .verdict', { timeout: 120000 });
      const ran = Date.now() - t1;
      console.log(`${name}: drawn ${drawn} ms, cost ${costed} ms, run ${ran} ms (${await page.locator('.run-panel .verdict').textContent()})`);
      await page.close();
    }
  }
} finally {
  await browser.close();
  server.close();
}
