// claude-mem's own project and private-prompt rules, run from its released bundle for the tests to compare with
// memsync's port (memsync.config.claude_mem.project_name).
//
// Usage: bun project_rule.js <worker-service.cjs>  < cases.json  > results.json
// cases: {"projects": [{"cwd": str, "env": {name: value|null}}], "prompts": [str|null]}
// results: {"projects": [{"primary", "parent", "isWorktree", "allProjects"} | {"rejected": true}],
//           "prompts": [{"stripped": str, "private": bool, "stored": str, "protocol": bool}]}
//
// The bundle's code is used as released, not restated. The functions and the module initialisers are
// cut out of worker-service.cjs by their minified names. Those names belong to 13.25.3, the version in
// tests/upstream/versions.json, and a missing one stops the script with its name. They are:
// - src/utils/project-name.ts: a7 (the CLAUDE_PROJECT_DIR override), c7 (git top level), s$e (getProjectName), hn
//   (getProjectContext), and its initialiser Pa;
// - src/utils/worktree.ts: r7 (detectWorktree), n7;
// - src/shared/expand-home.ts: zo (expandHome), x_;
// - src/utils/tag-stripping.ts: D8e (stripTags), ta (stripMemoryTags), NT (isInternalProtocolPayload), uu;
// - src/services/sqlite/prompt-storage.ts: zT (the text saveUserPrompt stores).
// The claude-code adapter's order (src/cli/adapters/claude-code.ts: r0e.normalizeInput) is followed here: a cwd
// that is not a non-empty string is rejected, then a7, then a null from a7 is rejected.
// The session-init route's 256 KiB cut comes before stripTags (SessionRoutes.ts: handleSessionInitByClaudeId), and it
// is cut out too: the code from "let u=o||" to the end of its truncation block.
"use strict";
const fs = require("fs");
const bundle = fs.readFileSync(process.argv[2], "utf8");

function balanced(start) {
  // From the first "{" at or after start to its matching "}". Braces inside these functions' strings and
  // template literals are balanced, so counting is enough.
  let i = bundle.indexOf("{", start), depth = 0;
  for (; i < bundle.length; i++) {
    if (bundle[i] === "{") depth++;
    else if (bundle[i] === "}" && --depth === 0) return i + 1;
  }
  throw new Error("unbalanced from " + start);
}
function cut(marker) {
  const at = bundle.indexOf(marker);
  if (at < 0 || bundle.indexOf(marker, at + 1) >= 0) throw new Error("not once in the bundle: " + marker);
  return bundle.slice(at, balanced(at));
}
const fn = (name) => cut(`function ${name}(`);
const init = (name) => {
  const text = cut(`${name}=W(()=>{`);
  return text.slice(text.indexOf("{") + 1, -1);
};
const truncation = (() => {
  const at = bundle.indexOf("let u=o||\"[media prompt]\",d=Buffer.byteLength(u,\"utf8\");if(d>Uz){");
  if (at < 0) throw new Error("not in the bundle: the session-init route's cut");
  const ifAt = bundle.indexOf("if(d>Uz)", at);
  const end = balanced(ifAt);
  return bundle.slice(at, end).replace(/y\.warn\([^;]*?\);/, "");
})();

// The hook's own step before it (session-init.ts), restated: the bundle holds it inline, checked here to be there.
const HOOK_PROMPT = 's=!r||!r.trim()?"[media prompt]":r';
if (!bundle.includes(HOOK_PROMPT)) throw new Error("not in the bundle: " + HOOK_PROMPT);
const hookPrompt = '!p||!p.trim()?"[media prompt]":p';
// The two caps, checked to be the bundle's (prompt-storage.ts' C$, SessionRoutes.ts' Uz).
for (const cap of ["var C$=4e3;", "Uz=256*1024"]) {
  if (!bundle.includes(cap)) throw new Error("not in the bundle: " + cap);
}

const source = `
var Vf, Xw, Ly, i7, o7, n$e, s7, $3, F3, kse, Ose, DT, Rse, N8e, L8e, M8e, Uz = 256 * 1024, C$ = 4e3;
const y = {debug() {}, warn() {}, info() {}};
const pe = (m) => ({default: m});
const se = () => {}, x_ = () => {}, n7 = () => {};
(() => {${init("x_")}})();
(() => {${init("n7")}})();
(() => {${init("Pa")}})();
(() => {${init("uu")}})();
${fn("zo")}
${fn("r7")}
${fn("a7")}
${fn("c7")}
${fn("s$e")}
${fn("hn")}
${fn("D8e")}
${fn("ta")}
${fn("NT")}
${fn("zT")}
function sessionInitCut(p) { const o = ${hookPrompt}; ${truncation} return u; }
return {a7, hn, ta, NT, zT, sessionInitCut};
`;
const rule = new Function("require", source)(require);

const cases = JSON.parse(fs.readFileSync(0, "utf8"));
const saved = {...process.env};
const projects = cases.projects.map(({cwd, env}) => {
  for (const [k, v] of Object.entries(env)) {
    if (v === null) delete process.env[k]; else process.env[k] = v;
  }
  try {
    if (!(typeof cwd === "string" && cwd.length > 0)) return {rejected: true};
    const dir = rule.a7(cwd);
    if (!(typeof dir === "string" && dir.length > 0)) return {rejected: true};
    return rule.hn(dir);
  } finally {
    for (const k of Object.keys(env)) {
      if (k in saved) process.env[k] = saved[k]; else delete process.env[k];
    }
  }
});
const prompts = cases.prompts.map((p) => {
  const stripped = rule.ta(rule.sessionInitCut(p));  // the route saves nothing when this is empty
  return {stripped, private: !stripped || stripped.trim() === "", stored: stripped ? rule.zT(stripped) : "",
          protocol: Boolean(rule.NT(p))};
});
process.stdout.write(JSON.stringify({projects, prompts}));
