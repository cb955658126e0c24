// transformers.js loads a mobius package folder (--layout transformers.js) as a
// local model and prints what it computes as JSON.
//   node transformers_runner.mjs generate FOLDER CACHE_DIR PROMPT MAX_NEW_TOKENS
//     -> {"text": pipeline('text-generation') output, "tokens": greedy generate() ids}
//   node transformers_runner.mjs embed FOLDER CACHE_DIR TEXT
//     -> {"dims": [...], "data": [...]} of pipeline('feature-extraction')
import { basename, dirname } from 'node:path';
import { load } from './modules.mjs';

const [mode, folder, cacheDir, text, maxNewTokens] = process.argv.slice(2);
const { pipeline, env } = await load('@huggingface/transformers');
env.allowRemoteModels = false;
env.localModelPath = dirname(folder);
env.cacheDir = cacheDir;
const options = { device: 'cpu' };

if (mode === 'generate') {
  const generator = await pipeline('text-generation', basename(folder), options);
  const settings = { max_new_tokens: Number(maxNewTokens), do_sample: false };
  const [output] = await generator(text, { ...settings, return_full_text: false });
  const inputs = generator.tokenizer(text);
  const ids = await generator.model.generate({ ...inputs, ...settings });
  console.log(JSON.stringify({ text: output.generated_text, tokens: Array.from(ids.data, Number) }));
} else if (mode === 'embed') {
  const extractor = await pipeline('feature-extraction', basename(folder), options);
  const output = await extractor(text);
  console.log(JSON.stringify({ dims: output.dims, data: Array.from(output.data) }));
} else {
  throw new Error(`unknown mode ${mode}`);
}
