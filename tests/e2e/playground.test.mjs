// End-to-end against the release build (dist/) in Debian's Chromium via playwright-core:
// load the Megatron MLP from a link, step the timeline, find the tensor-parallel all-reduce
// in the graph and the ledger, open rank 5's lens, run numerics, reload, embed, and the
// JavaScript API page. Screenshots go to target/e2e/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { serveDist, launchBrowser, screenshotDir } from './harness.mjs';

let server, browser;
// The ONNX fixtures (tests/models/), whatever directory the tests run from.
const model = (name) => fileURLToPath(new URL(`../models/${name}`, import.meta.url));
const shards = ['x=dp,-', 'linear_0.w_0=-,mp', 'linear_0.b_0=mp', 'linear_1.w_0=mp,-'].join(';');
const link = `#s=megatron_mlp&mesh=2x4:dp,mp&shard=${encodeURIComponent(shards)}&stage=forward&t=0&rank=0&n=paddle`;

before(async () => {
  server = await serveDist();
  browser = await launchBrowser();
  mkdirSync(screenshotDir, { recursive: true });
});

after(async () => {
  await browser?.close();
  server?.close();
});

async function open(page, url) {
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForSelector('.mesh-view svg', { timeout: 30000 });
  return errors;
}

test('Megatron MLP from a link: timeline, communication, rank 5, numerics, reload', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = await open(page, server.url + link);
  assert.equal(await page.locator('.mesh-panel .device').count(), 8);
  assert.match(await page.locator('.timeline .count').innerText(), /^0 \/ \d+ events/);
  await page.screenshot({ path: `${screenshotDir}/playground-start.png` });
  // Step the timeline to the end.
  await page.keyboard.press('End');
  const [shown, total] = (await page.locator('.timeline .count').innerText()).match(/^(\d+) \/ (\d+)/).slice(1);
  assert.ok(Number(total) > 0);
  assert.equal(shown, total, 'the timeline is at the end');
  // The tensor-parallel all-reduce in the per-rank graph and the ledger.
  await page.click('.tabs .tab:nth-child(3)');
  assert.equal(await page.locator('.program-panel .op.comm.tp').count(), 1);
  assert.match(await page.locator('.ledger').innerText(), /tensor parallel/);
  // Rank 5's lens.
  await page.selectOption('#rank', '5');
  assert.match(await page.locator('.rank-lens h2').innerText(), /coordinates \[1, 1\]/);
  assert.match(await page.locator('.rank-lens').textContent(), /all_reduce linear_1\.tmp_0 over \[4, 5, 6, 7\]/);
  assert.match(await page.locator('.program-panel h2').innerText(), /^Rank 5/);
  // Numerics in the browser: every tensor passes, and all were compared: 2 losses, and a
  // gradient and an updated value for each of the MLP's 4 parameters.
  await page.click('#run');
  await page.waitForSelector('.run-panel .verdict', { timeout: 60000 });
  assert.match(await page.locator('.run-panel .verdict').innerText(), /^10 of 10 tensors match/);
  assert.equal(await page.locator('.run-panel tr.fail').count(), 0);
  await page.screenshot({ path: `${screenshotDir}/playground-rank5.png` });
  // Reload: the same state comes back from the URL.
  const before = page.url();
  await page.reload();
  await page.waitForSelector('.mesh-view svg');
  assert.equal(page.url(), before);
  assert.match(await page.locator('.program-panel h2').innerText(), /^Rank 5/);
  assert.equal(await page.locator('#rank').inputValue(), '5');
  assert.deepEqual(errors, [], 'no uncaught page errors');
});

test('dragging a mesh axis onto a tensor dim annotates it', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = await open(page, server.url + '#s=dp_mlp&var=linear_0.w_0');
  const dim = page.locator('.inspector [data-drop-dim="1"]');
  assert.equal(await dim.locator('select').inputValue(), '?');
  await page.locator('.mesh-panel .axis-name[data-axis="0"]').dragTo(dim);
  assert.equal(await dim.locator('select').inputValue(), '0');
  assert.match(await dim.getAttribute('class'), /pinned/);
  assert.match(decodeURIComponent(page.url()), /shard=[^&]*linear_0\.w_0=\?,dp/);
  assert.deepEqual(errors, []);
});

test('an embed link hides the chrome; a hostile link explains itself', async () => {
  const page = await browser.newPage({ viewport: { width: 1000, height: 700 } });
  await open(page, server.url + '?embed=1&hide=editor,run' + link);
  assert.equal(await page.locator('.topbar').count(), 0);
  assert.equal(await page.locator('.run-panel').count(), 0);
  assert.equal(await page.locator('.program-panel').count(), 1);
  await page.screenshot({ path: `${screenshotDir}/playground-embed.png` });
  const bad = await browser.newPage();
  await open(bad, server.url + '#s=megatron_mlp&mesh=0x0&shard=%ZZ');
  assert.match(await bad.locator('.banner').innerText(), /This link could not be opened/);
});

test('editing the address\'s hash in an open tab opens that link', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = await open(page, server.url + '#s=dp_mlp');
  const text = () => page.locator('#plan-text').inputValue();
  assert.ok(!(await text()).includes('layer_norm'), 'the MLP has no layer norm');
  await page.evaluate(() => { location.hash = 's=gpt_dp_mp'; });
  await page.waitForFunction(() => document.querySelector('#plan-text').value.includes('layer_norm'));
  assert.match(decodeURIComponent(page.url()), /#s=gpt_dp_mp/);
  // A hash that does not open says so and keeps the plan.
  await page.evaluate(() => { location.hash = 's=no_such_scenario'; });
  await page.waitForFunction(() => /could not be opened/.test(document.querySelector('.banner')?.innerText ?? ''));
  assert.ok((await text()).includes('layer_norm'));
  assert.deepEqual(errors, []);
});

test('the JavaScript API example page plans without the UI', async () => {
  const page = await browser.newPage();
  await page.goto(server.url + 'api.html');
  await page.waitForFunction(() => document.getElementById('summary').textContent.includes('ranks'), null, { timeout: 30000 });
  assert.match(await page.locator('#summary').innerText(), /^8 ranks, \d+ completion events, \d+ collectives in all$/);
  assert.ok((await page.locator('#ledger tbody tr').count()) > 0);
  assert.equal(await page.locator('.mesh-view').count(), 0, 'the playground is not mounted');
  assert.match(await page.evaluate(() => document.body.dataset.error), /^unknown scenario `nope`/);
  assert.match(await page.evaluate(() => document.body.dataset.typo), /unknown field `layer`/);
  assert.equal(await page.locator('a[href="./"]').count(), 1, 'a link back to the playground');
});

test('the cost panel draws time and memory, toggles ZeRO and compares with a pinned plan', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = await open(page, server.url + '#s=gpt_dp_mp&rank=0');
  const panel = page.locator('.cost-panel');
  // The engine's worker prices the plan; the bars arrive with its answer.
  await page.waitForSelector('.cost-panel .cost-bars .bar');
  assert.equal(await panel.locator('.cost-bars .bar').count(), 8);
  assert.equal(await panel.locator('.memory-chart .peak').count(), 1);
  await page.click('#pin');
  await page.selectOption('#zero', '3');
  await page.waitForSelector('.diff-table tr.collective');
  const table = await panel.locator('.diff-table').innerText();
  assert.match(table, /backward\s+reduce_scatter/);
  assert.match(decodeURIComponent(page.url()), /zero=3/);
  await page.selectOption('#topology', 'tpu-v5e-16');
  await page.waitForFunction(() => location.hash.includes('topo=tpu-v5e-16'));
  await panel.screenshot({ path: `${screenshotDir}/cost-panel.png` });
  // Embedded with only the cost panel beside the program, the charts stay readable.
  const embed = await browser.newPage({ viewport: { width: 900, height: 700 } });
  await open(embed, server.url + '?embed=1&hide=editor,run,ledger,rank,inspector#s=gpt_dp_mp');
  await embed.waitForSelector('.cost-panel .cost-bars .bar');
  assert.equal(await embed.locator('.cost-panel .cost-bars .bar').count(), 8);
  await embed.screenshot({ path: `${screenshotDir}/cost-embed.png` });
  assert.deepEqual(errors, []);
});

test('the pipeline panel: schedules switch and the bubble follows the closed form', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = await open(page, `${server.url}#s=gpt_dp_mp&mesh=4x2:pp,dp&ideal=1`);
  await page.waitForSelector('.gantt .stage-row');
  assert.equal(await page.locator('.gantt .stage-row').count(), 4);
  assert.equal(await page.locator('.mesh-panel .device.stage-3').count(), 2);
  const bubble = async () => Number(await page.locator('#bubble-fraction').innerText());
  const waitBubble = async (want) => {
    await page.waitForFunction((w) => {
      const el = document.querySelector('#bubble-fraction');
      return el && Math.abs(Number(el.innerText) - w) < 5e-4;
    }, want, { timeout: 20000 });
    return bubble();
  };
  // p = 4 stages; fthenb with M micro-batches idles (p−1)/(M+p−1).
  await page.fill('#micro-batches', '8');
  assert.ok(Math.abs(await waitBubble(3 / 11) - 3 / 11) < 5e-4);
  await page.selectOption('#schedule', '1f1b');
  assert.ok(Math.abs(await waitBubble(3 / 11) - 3 / 11) < 5e-4);
  // Interleaved with 2 chunks: (p−1)/(V·M+p−1).
  await page.selectOption('#chunks', '2');
  await page.selectOption('#schedule', 'vpp');
  assert.ok(Math.abs(await waitBubble(3 / 19) - 3 / 19) < 5e-4);
  // The paper's zero bubble (T_F = T_B = T_W = 1 in ideal units): (p−1)(T_F+T_B−T_W)
  // idle per stage in a step of M·3 + 3.
  await page.selectOption('#chunks', '1');
  await page.selectOption('#schedule', 'zbh1_paper');
  assert.ok(Math.abs(await waitBubble(3 / 27) - 3 / 27) < 5e-4);
  await page.locator('.pipeline-panel').screenshot({ path: `${screenshotDir}/pipeline-panel.png` });
  await page.screenshot({ path: `${screenshotDir}/playground-pipeline.png`, fullPage: false });
  assert.deepEqual(errors, []);
  await page.close();
});

test('the export panel writes a JAX script to copy or download', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = await open(page, `${server.url}#s=megatron_mlp`);
  await page.click('#export-shard-map');
  await page.waitForSelector('#export-script');
  const script = await page.locator('#export-script').innerText();
  assert.match(script, /^#!\/usr\/bin\/env python3/);
  assert.match(script, /all_reduce\(v\["linear_1\.tmp_0"\], "SUM", \("mp",\)/);
  const download = page.locator('#export-download');
  assert.equal(await download.getAttribute('download'), 'shardlab_shard_map.py');
  assert.match(await download.getAttribute('href'), /^data:text\/x-python;charset=utf-8,/);
  await page.click('#export-gspmd');
  // While the engine writes the new script the old one is gone from the page, so the wait
  // reads the element only when it is there.
  await page.waitForFunction(() => document.querySelector('#export-script')?.textContent.includes('def forward(v):'));
  await page.locator('.export-panel').screenshot({ path: `${screenshotDir}/export-panel.png` });
  assert.deepEqual(errors, []);
});

test('a model file opened in the playground is imported, planned and verified; the JS API imports it too', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = await open(page, server.url + '#s=dp_mlp');
  // PaddleFormers' Llama decoder, exported by paddle2onnx (tests/models/), planned dp × tp.
  await page.fill('#import-parallel', 'dp=2,tp=2');
  await page.setInputFiles('#import-file', model('llama_model_2l.onnx'));
  await page.waitForFunction(() => document.querySelector('.banner')?.textContent.startsWith('Imported'), null, { timeout: 60000 });
  assert.match(await page.locator('.banner').innerText(),
    /^Imported llama_model_2l\.onnx: 91 ops from 234 nodes \(15 patterns fused, planned as dp=2,tp=2\)/);
  assert.equal(await page.locator('.mesh-panel .device').count(), 4);
  assert.match(await page.locator('#program').textContent(), /rms_norm/);
  await page.screenshot({ path: `${screenshotDir}/playground-import.png` });
  await page.click('#run');
  await page.waitForSelector('.run-panel .verdict', { timeout: 120000 });
  assert.match(await page.locator('.run-panel .verdict').innerText(), /^(\d+) of \1 tensors match/);
  assert.equal(await page.locator('.run-panel tr.fail').count(), 0);
  // A file that is not a model leaves the plan and names the file.
  const before = await page.locator('#plan-text').inputValue();
  await page.setInputFiles('#import-file', { name: 'notes.onnx', mimeType: 'application/octet-stream', buffer: Buffer.from('\x0a\xff\xff\xff', 'latin1') });
  await page.waitForFunction(() => document.querySelector('.banner')?.textContent.startsWith('notes.onnx'), null, { timeout: 30000 });
  assert.match(await page.locator('.banner').innerText(), /^notes\.onnx: not an ONNX model/);
  assert.equal(await page.locator('#plan-text').inputValue(), before);
  // The same import from JavaScript, in the engine's module.
  const api = await browser.newPage();
  await api.goto(server.url + 'api.html');
  const bytes = [...readFileSync(model('mlp_block.onnx'))];
  const pir = readFileSync(model('llama_causal_2l.pir'), 'utf8');
  const out = await api.evaluate(async ([bytes, pir]) => {
    const { default: init, import_model } = await import('./shardlab-engine.js');
    await init({ module_or_path: './shardlab-engine_bg.wasm' });
    const good = import_model(new Uint8Array(bytes), { name: 'mlp.onnx', dims: 'DynamicDimension.0=4', parallel: 'tp=2' });
    let bad;
    try { import_model(new Uint8Array(bytes), { parallel: 'dp=2', size: 3 }); } catch (e) { bad = String(e); }
    // A Paddle program's text, told apart by its content.
    const paddle = import_model(new TextEncoder().encode(pir), { name: 'llama.pir', parallel: 'dp=2,tp=2' });
    return { text: good.text, summary: good.summary, bad, paddle: paddle.summary };
  }, [bytes, pir]);
  assert.match(out.summary, /^Imported mlp\.onnx: 7 ops from 13 nodes/);
  assert.ok(out.text.split('\n').includes('mesh [2] (tp)'), out.text);
  assert.match(out.bad, /unknown field `size`/);
  assert.match(out.paddle, /^Imported llama\.pir: 91 ops from 314 nodes \(13 patterns fused, planned as dp=2,tp=2\)/);
  assert.deepEqual(errors, []);
});
