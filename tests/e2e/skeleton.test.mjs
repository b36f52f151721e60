// End-to-end: serve the release build (dist/) on 127.0.0.1, load it in Debian's Chromium
// through playwright-core, check the mesh and the program are on the page, and save a
// screenshot under target/e2e/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { serveDist, launchBrowser, screenshotDir } from './harness.mjs';

let server, browser;

before(async () => {
  server = await serveDist();
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  server?.close();
});

test('the playground shows the mesh and the program', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(server.url);
  await page.waitForSelector('.mesh-view svg', { timeout: 30000 });
  assert.equal(await page.locator('.device').count(), 8, 'a [2, 4] mesh has 8 devices');
  const caption = await page.locator('.mesh-view figcaption').innerText();
  assert.match(caption, /mesh \[2, 4\] \(dp, mp\): 8 devices/);
  const program = await page.locator('.program-text').innerText();
  assert.match(program, /op matmul_v2\(X=x, Y=linear_0\.w_0\) -> \(Out=linear_0\.tmp_0\)/);
  await page.selectOption('#preset', 'gpt');
  await page.waitForFunction(() => document.querySelector('.program-text')?.textContent.includes('fused_softmax_mask_upper_triangle'));
  mkdirSync(screenshotDir, { recursive: true });
  await page.screenshot({ path: `${screenshotDir}/skeleton.png`, fullPage: false });
  assert.deepEqual(errors, [], 'no uncaught page errors');
});
