// ort_check.js - runs exported ONNX models in onnxruntime-node and compares them with dlbench's logits.
//
// usage: node ort_check.js MODULE_DIR DIR...   (MODULE_DIR holds node_modules/onnxruntime-node)
// Each DIR has model.onnx (or the file named by $ONNX_NAME), input.bin, logits.bin and meta.json
// (written by build/tests/test_export). Prints one line per DIR:
//   ok DIR rows=R agree=F maxrel=X      argmax agreement over rows (the last axis is the classes)
//   bad DIR why                         and exits 1 when any DIR is bad
// agreement >= 0.999 and maxrel <= 1e-4 pass, maxrel being per row
// max|ort - dlbench| / max(1, max|dlbench|).
const path = require('path');
const fs = require('fs');
const ort = require(path.join(process.argv[2], 'node_modules', 'onnxruntime-node'));

function readTyped(file, dtype) {
  const b = fs.readFileSync(file);
  const ab = b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
  return dtype === 'int64' ? new BigInt64Array(ab) : new Float32Array(ab);
}

async function check(dir) {
  const meta = JSON.parse(fs.readFileSync(path.join(dir, 'meta.json'), 'utf8'));
  const model = path.join(dir, process.env.ONNX_NAME || 'model.onnx');
  const x = readTyped(path.join(dir, 'input.bin'), meta.input_dtype);
  const want = readTyped(path.join(dir, 'logits.bin'), 'float32');
  const session = await ort.InferenceSession.create(model);
  if (session.inputNames[0] !== 'input' || session.outputNames[0] !== 'logits')
    return `bad ${dir} names ${session.inputNames} -> ${session.outputNames}`;
  const feeds = { input: new ort.Tensor(meta.input_dtype, x, meta.input_shape) };
  const out = (await session.run(feeds)).logits;
  const dims = out.dims.join('x'), wdims = meta.logits_shape.join('x');
  if (dims !== wdims) return `bad ${dir} logits ${dims}, dlbench ${wdims}`;
  const got = out.data;
  const classes = meta.logits_shape[meta.logits_shape.length - 1];
  const rows = got.length / classes;
  let agree = 0, maxrel = 0;
  for (let r = 0; r < rows; r++) {
    let ag = 0, aw = 0, scale = 1, diff = 0;
    for (let c = 0; c < classes; c++) {
      const g = got[r * classes + c], w = want[r * classes + c];
      if (g > got[r * classes + ag]) ag = c;
      if (w > want[r * classes + aw]) aw = c;
      scale = Math.max(scale, Math.abs(w));
      diff = Math.max(diff, Math.abs(g - w));
      if (!Number.isFinite(g)) diff = Infinity;
    }
    if (ag === aw) agree++;
    maxrel = Math.max(maxrel, diff / scale);
  }
  const line = `rows=${rows} agree=${(agree / rows).toFixed(4)} maxrel=${maxrel.toExponential(2)}`;
  return agree / rows >= 0.999 && maxrel <= 1e-4 ? `ok ${dir} ${line}` : `bad ${dir} ${line}`;
}

(async () => {
  let bad = 0;
  for (const dir of process.argv.slice(3)) {
    let line;
    try {
      line = await check(dir);
    } catch (e) {
      line = `bad ${dir} ${String(e.message || e).split('\n')[0]}`;
    }
    if (line.startsWith('bad')) bad++;
    console.log(line);
  }
  process.exit(bad ? 1 : 0);
})();
