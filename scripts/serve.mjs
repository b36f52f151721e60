// Serves the release build (dist/) on 127.0.0.1, gzip-compressed when the browser accepts
// it (the wasm shrinks to about a third). Node built-ins only; used by scripts/serve.sh.
//   node scripts/serve.mjs [port]
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { extname, join, normalize, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const dist = resolve(dirname(fileURLToPath(import.meta.url)), '../dist');
const port = Number(process.argv[2] ?? process.env.PORT ?? 8080);
const types = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.wasm': 'application/wasm',
  '.css': 'text/css', '.svg': 'image/svg+xml', '.png': 'image/png',
};
const cache = new Map();

createServer(async (req, res) => {
  let path;
  try {
    path = normalize(decodeURIComponent(new URL(req.url, 'http://x').pathname));
  } catch {
    res.writeHead(400).end('bad request');
    return;
  }
  const file = join(dist, path.endsWith('/') ? `${path}index.html` : path);
  if (!file.startsWith(dist)) {
    res.writeHead(403).end('forbidden');
    return;
  }
  try {
    const body = await readFile(file);
    const type = types[extname(file)] ?? 'application/octet-stream';
    if (/\bgzip\b/.test(req.headers['accept-encoding'] ?? '')) {
      if (!cache.has(file) || cache.get(file).size !== body.length) {
        cache.set(file, { size: body.length, gz: gzipSync(body, { level: 9 }) });
      }
      res.writeHead(200, { 'content-type': type, 'content-encoding': 'gzip', vary: 'accept-encoding' });
      res.end(cache.get(file).gz);
    } else {
      res.writeHead(200, { 'content-type': type });
      res.end(body);
    }
  } catch {
    res.writeHead(404).end('not found');
  }
}).listen(port, '127.0.0.1', () => {
  console.log(`\nShardLab playground: http://127.0.0.1:${port}/  (gzip, from dist/)\n`);
});
