// Replays a reference case of testing/js/decoder_cases.py in onnxruntime-node
// or onnxruntime-web (WebAssembly backend), carrying the KV cache itself, and
// prints {"steps": [max |logit diff| per step]} as JSON.
//   node decoder_runner.mjs CASE.json node|web
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { load } from './modules.mjs';

const [casePath, backend] = process.argv.slice(2);
const testCase = JSON.parse(readFileSync(casePath, 'utf8'));
const ort = await load(backend === 'web' ? 'onnxruntime-web' : 'onnxruntime-node');
const options = backend === 'web'
  ? { executionProviders: ['wasm'] }
  : { executionProviders: ['cpu'], intraOpNumThreads: 2, interOpNumThreads: 1 };
if (backend === 'web') ort.env.wasm.numThreads = 1;

function tensor(ort, { type, dims, data }) {
  const array = type === 'int64' ? BigInt64Array.from(data.map(BigInt))
    : type === 'int32' ? Int32Array.from(data) : Float32Array.from(data);
  return new ort.Tensor(type, array, dims);
}

function maxDiff(got, expected, dims, realRows) {
  const [batch, seq, vocab] = dims;
  let worst = 0;
  for (let b = 0; b < batch; b++) {
    for (let s = 0; s < seq; s++) {
      if (realRows && !realRows[b][s]) continue; // padding: undefined on both sides
      for (let v = 0; v < vocab; v++) {
        const i = (b * seq + s) * vocab + v;
        const d = Math.abs(got[i] - expected[i]);
        worst = Number.isNaN(d) ? Infinity : Math.max(worst, d);
      }
    }
  }
  return worst;
}

const session = await ort.InferenceSession.create(readFileSync(testCase.model), {
  ...options,
  externalData: [{ path: 'model.onnx.data', data: readFileSync(testCase.model + '.data') }],
});
let cache = {};
const diffs = [];
for (const [index, step] of testCase.steps.entries()) {
  const feeds = { ...cache };
  for (const [name, value] of Object.entries(step.feeds)) feeds[name] = tensor(ort, value);
  const out = await session.run(feeds);
  const expected = new Float32Array(readFileSync(join(dirname(casePath), step.logits.file)).buffer.slice(0));
  const logits = out.logits;
  if (logits.dims.join() !== step.logits.dims.join()) {
    throw new Error(`step ${index}: logits dims ${logits.dims} != ${step.logits.dims}`);
  }
  diffs.push(maxDiff(logits.data, expected, logits.dims, index === 0 ? testCase.prefill_mask : null));
  cache = {};
  for (const [present, past] of Object.entries(testCase.cache)) cache[past] = out[present];
}
console.log(JSON.stringify({ steps: diffs }));
