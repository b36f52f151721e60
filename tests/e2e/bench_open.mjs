// Times the playground's first load at real size and a Run of the shrunk twin, three times
// (docs/benchmarks.md). Not a test: run by hand after a release build,
// `node tests/e2e/bench_open.mjs`.
import { serveDist, launchBrowser } from './harness.mjs';
const server = await serveDist();
const browser = await launchBrowser();
try {
  for (let i = 0; i < 3; i++) {
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
    const t0 = Date.now();
    await page.goto(server.url);
    await page.waitForSelector('.mesh-view svg', { timeout: 60000 });
    const drawn = Date.now() - t0;
    await page.waitForFunction(() => document.querySelector('.cost-panel')?.textContent.includes('MFU'), null, { timeout: 60000 });
    const costed = Date.now() - t0;
    const t1 = Date.now();
    await page.click('#run');
    await page.waitForSelector('.run-panel .verdict', { timeout: 120000 });
    console.log(`open: drawn ${drawn} ms, cost ${costed} ms; run ${Date.now() - t1} ms: ${await page.locator('.run-panel .verdict').textContent()}`);
    await page.close();
  }
} finally { await browser.close(); server.close(); }
