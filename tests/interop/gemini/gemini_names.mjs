// Prints the names the installed @google/gemini-cli gives MCP tools: its own compiled
// DiscoveredMCPTool (name = generateValidName(`${server}_${tool}`)) and generateValidName, taken from
// the bundle chunk that exports them. Input on stdin: {"pairs": [[server, tool], ...], "names": [...]}.
// Output: {"version", "chunk", "tools": [name per pair], "valid_names": [generateValidName per name]}.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = path.join(here, 'node_modules', '@google', 'gemini-cli');
const version = JSON.parse(fs.readFileSync(path.join(pkg, 'package.json'), 'utf8')).version;
const input = JSON.parse(fs.readFileSync(0, 'utf8'));
console.warn = () => {}; // the truncation warning goes to the debug logger
for (const chunk of fs.readdirSync(path.join(pkg, 'bundle')).sort()) {
  const file = path.join(pkg, 'bundle', chunk);
  if (!chunk.startsWith('chunk-') || !fs.readFileSync(file, 'utf8').includes('function generateValidName(')) continue;
  const core = await import(file);
  if (typeof core.generateValidName !== 'function' || typeof core.DiscoveredMCPTool !== 'function') continue;
  const tools = input.pairs.map(([server, tool]) => new core.DiscoveredMCPTool({}, server, tool, 'desc', {}, {}).name);
  const validNames = (input.names || []).map((name) => core.generateValidName(name));
  process.stdout.write(JSON.stringify({ version, chunk, tools, valid_names: validNames }) + '\n');
  process.exit(0);
}
console.error('no bundle chunk exports generateValidName and DiscoveredMCPTool');
process.exit(1);
