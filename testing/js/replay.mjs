// Replays a reference case of testing/js/decoder_cases.py in any onnxruntime
// JavaScript binding (node, web/WASM, web/WebGPU), carrying the KV cache itself.
// Environment-neutral: the caller hands in the runtime and a file reader.

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

/**
 * Runs every step of `testCase`; returns the largest |logit difference| per step.
 * readFile(name) -> Promise<Uint8Array> reads model.onnx, model.onnx.data and
 * the logits files the case names.
 */
export async function replay(ort, testCase, readFile, sessionOptions) {
  const session = await ort.InferenceSession.create(await readFile('model.onnx'), {
    ...sessionOptions,
    externalData: [{ path: 'model.onnx.data', data: await readFile('model.onnx.data') }],
  });
  let cache = {};
  const diffs = [];
  for (const [index, step] of testCase.steps.entries()) {
    const feeds = { ...cache };
    for (const [name, value] of Object.entries(step.feeds)) feeds[name] = tensor(ort, value);
    const out = await session.run(feeds);
    const bytes = await readFile(step.logits.file);
    const expected = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
    const logits = out.logits;
    if (logits.dims.join() !== step.logits.dims.join()) {
      throw new Error(`step ${index}: logits dims ${logits.dims} != ${step.logits.dims}`);
    }
    const data = await logits.getData();
    diffs.push(maxDiff(data, expected, logits.dims, index === 0 ? testCase.prefill_mask : null));
    cache = {};
    for (const [present, past] of Object.entries(testCase.cache)) cache[past] = out[present];
  }
  return diffs;
}
