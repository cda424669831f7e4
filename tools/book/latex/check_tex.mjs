// Check that every formula in a set of markdown texts typesets in MathJax 3, the way
// JupyterLab / Notebook 7 (mathjax-full 3.2.2) and Google Colab render it.
//
// stdin:  JSON list of {"where": "<notebook> cell <i>", "text": "<markdown source>",
//                       "doc": "<notebook>" (optional; macros defined with \newcommand
//                       persist within one doc, as they do within one page in Jupyter)}
// stdout: JSON {"formulas": <number of formulas compiled>,
//               "problems": [{"where", "formula", "error"}, ...]}
// Exit code 0 whenever the input could be read; the caller decides what a problem means.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';

const require = createRequire(import.meta.url);
const { mathjax } = require('mathjax-full/js/mathjax.js');
const { TeX } = require('mathjax-full/js/input/tex.js');
const { FindTeX } = require('mathjax-full/js/input/tex/FindTeX.js');
const { CHTML } = require('mathjax-full/js/output/chtml.js');
const { liteAdaptor } = require('mathjax-full/js/adaptors/liteAdaptor.js');
const { RegisterHTMLHandler } = require('mathjax-full/js/handlers/html.js');
const { AllPackages } = require('mathjax-full/js/input/tex/AllPackages.js');

// JupyterLab 4 configures `packages: AllPackages.concat('require')` (mathjax-full 3.2.2).
// We drop the packages that hide errors ('noerrors' renders the source instead of an
// error, 'noundefined' renders unknown macros in red instead of failing) and 'require'
// (it loads packages at run time through MathJax's component loader, absent here).
const HIDES_ERRORS = new Set(['noerrors', 'noundefined', 'require']);
export const PACKAGES = AllPackages.filter((name) => !HIDES_ERRORS.has(name));

// The delimiters Jupyter configures (the same as Colab's and as MathJax's own defaults
// plus $...$).
const FIND_OPTIONS = {
  inlineMath: [['$', '$'], ['\\(', '\\)']],
  displayMath: [['$$', '$$'], ['\\[', '\\]']],
  processEscapes: true,
  processEnvironments: true,
  processRefs: true,
};

class CapturedTexError extends Error {}

const adaptor = liteAdaptor();
RegisterHTMLHandler(adaptor);

function newDocument() {
  const tex = new TeX({
    packages: PACKAGES,
    ...FIND_OPTIONS,
    // Instead of typesetting the error message in red, hand it to us.
    formatError: (_jax, err) => {
      throw new CapturedTexError(err.message);
    },
  });
  // Jupyter typesets to CommonHTML; some packages (bussproofs) need an output jax, and
  // rendering as well as parsing catches what only fails at output time.
  return mathjax.document('', { InputJax: tex, OutputJax: new CHTML({ fontURL: '.' }) });
}

// Code is not math: drop fenced code blocks and code spans before looking for math.
// (Jupyter's own removeMath() protects exactly these from the math finder.)
function stripCode(text) {
  return text
    .replace(/\r\n?/g, '\n')
    .replace(/^ {0,3}(`{3,}|~{3,})[^\n]*\n[\s\S]*?(?:^ {0,3}\1[`~]*[ \t]*$|(?![\s\S]))/gm, '\n\n')
    .replace(/(?<![`\\])(`+)(?!`)([\s\S]*?[^`])\1(?!`)/g, ' ');
}

// Math never runs across a blank line: in Jupyter the math protector stops at one, and
// in the rendered HTML each paragraph is a separate string for MathJax's finder.
function paragraphs(text) {
  return text.split(/\n[ \t]*\n/);
}

const snippet = (s, n = 80) => {
  const one = s.trim().replace(/\s+/g, ' ');
  return one.length > n ? one.slice(0, n) + ' ...' : one;
};

function braceBalance(s) {
  let depth = 0;
  for (const m of s.matchAll(/\\.|[{}]/gs)) {
    if (m[0] === '{') depth++;
    else if (m[0] === '}') depth--;
  }
  return depth;
}

// Delimiters left over once MathJax has found all the math: signs of a formula that
// MathJax will silently show as plain text.
function leftovers(par, found) {
  const problems = [];
  let rest = par.split('');
  for (const item of found) {
    for (let k = item.start.n; k < item.end.n; k++) rest[k] = ' ';
  }
  rest = rest.join('');
  const unbalancedNote = (s) =>
    braceBalance(s) > 0 ? ' (a "{" is never closed, so MathJax cannot find the end)' : '';

  const display = rest.indexOf('$$');
  if (display >= 0) {
    const tail = par.slice(display);
    problems.push({
      formula: snippet(tail),
      error: 'unclosed display math: "$$" opened but never closed in this paragraph'
        + unbalancedNote(tail.slice(2)),
    });
  }
  const singles = [...rest.matchAll(/(?<!\$)\$(?!\$)/g)].map((m) => m.index);
  if (singles.length >= 2 && (display < 0 || singles[0] < display)) {
    const body = par.slice(singles[0] + 1, singles[1]);
    if (braceBalance(body) > 0) {
      problems.push({
        formula: snippet('$' + body + '$'),
        error: 'unbalanced braces: a "{" is never closed, so MathJax does not see this as math',
      });
    }
  }
  for (const [open, close, kind] of [['\\[', '\\]', 'display'], ['\\(', '\\)', 'inline']]) {
    const at = rest.indexOf(open);
    if (at >= 0) {
      const tail = par.slice(at);
      problems.push({
        formula: snippet(tail),
        error: `unclosed ${kind} math: "${open}" opened but no matching "${close}" in this paragraph`
          + unbalancedNote(tail.slice(2)),
      });
    }
  }
  for (const m of rest.matchAll(/\\begin\s*\{([^}]*)\}/g)) {
    const tail = par.slice(m.index);
    problems.push({
      formula: snippet(tail),
      error: `\\begin{${m[1]}} is never closed by \\end{${m[1]}} in this paragraph`
        + unbalancedNote(tail.slice(m[0].length)),
    });
  }
  return problems;
}

function check(cells) {
  const finder = new FindTeX(FIND_OPTIONS);
  const documents = new Map();
  const problems = [];
  let formulas = 0;
  for (const { where, text, doc } of cells) {
    const key = doc ?? where;
    if (!documents.has(key)) documents.set(key, newDocument());
    const document = documents.get(key);
    for (const par of paragraphs(stripCode(text ?? ''))) {
      const found = finder.findMath([par]);
      for (const item of found) {
        if (item.display === null) continue; // an escaped \$ or \\, not math
        formulas++;
        const formula = item.open + item.math + item.close;
        try {
          document.convert(item.math, { display: item.display });
        } catch (err) {
          const error = err instanceof CapturedTexError ? err.message : `MathJax crashed: ${err}`;
          problems.push({ where, formula, error });
        }
      }
      for (const p of leftovers(par, found)) problems.push({ where, ...p });
    }
  }
  return { formulas, problems };
}

const input = JSON.parse(readFileSync(0, 'utf8'));
process.stdout.write(JSON.stringify(check(input)) + '\n');
