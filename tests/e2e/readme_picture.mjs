// Takes the README's and the book's picture of the playground (docs/images/playground.png)
// from the release build (dist/): the GPT block on a 2×4 mesh with dp × Megatron mp, the
// timeline at its end, a tensor selected so its tiles show. Run by hand after a release
// build: `node tests/e2e/readme_picture.mjs` (not a test: it asserts nothing).
import { serveDist, launchBrowser } from './harness.mjs';
import { resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const out = resolve(dirname(fileURLToPath(import.meta.url)), '../../docs/images/playground.png');
const server = await serveDist();
const browser = await launchBrowser();
try {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, deviceScaleFactor: 1 });
  await page.goto(`${server.url}#s=gpt_dp_mp&rank=5&n=paddle`);
  await page.waitForSelector('.mesh-view svg', { timeout: 30000 });
  await page.keyboard.press('End');
  const chip = page.locator('.program-panel .chip', { hasText: 'h0.attn.probs' }).first();
  if (await chip.count()) await chip.click();
  await page.waitForTimeout(500);
  await page.screenshot({ path: out });
  console.log(`wrote ${out}`);
} finally {
  await browser.close();
  server.close();
}
