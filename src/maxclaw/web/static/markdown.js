// A safe Markdown subset for what agents write (messages, card questions): built as DOM nodes,
// never as HTML. Raw HTML in the text stays text; a link is kept only for http(s) and mailto
// and opens in a new tab with rel="noopener noreferrer"; nothing else of the text becomes an
// attribute. Blocks: paragraphs, fenced code (```), bullet (- or *) and numbered lists,
// headings (# to ###, shown as bold lines). Inline: `code`, **bold**, *italic* / _italic_,
// [text](url) and bare web addresses (http and https).

import { h } from './dom.js';

const MAX_INPUT = 100_000; // beyond this the text is shown as plain text (no parsing work)
// an inline pattern without its closing mark rescans the rest of the line: bounded per line
const MAX_INLINE = 4_000;
const FENCE = /^\s{0,3}(```|~~~)/;
const BULLET = /^\s{0,3}[-*+]\s+(.*)$/;
const NUMBERED = /^\s{0,3}(\d{1,9})[.)]\s+(.*)$/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
// one inline token at a time, leftmost first; the alternatives are tried in this order
const INLINE = new RegExp([
  '(`+)([^`]|[^`][\\s\\S]*?[^`])\\1(?!`)', // 1,2: code span
  '\\*\\*(?=\\S)([\\s\\S]*?\\S)\\*\\*', // 3: bold
  '(?<![\\w*])\\*(?=\\S)([^*]*?\\S)\\*(?![\\w*])', // 4: italic with *
  '(?<![\\w_])_(?=\\S)([^_]*?\\S)_(?![\\w_])', // 5: italic with _
  '\\[([^\\]\\n]{1,500})\\]\\(\\s*([^\\s()]{1,2000})\\s*\\)', // 6,7: link
  '(https?://[^\\s<>()]{1,2000}[^\\s<>().,;:!?\'"])', // 8: bare URL
].join('|'));

/** The href of a link, or null when its scheme is not one a message may link to. */
export function safeHref(url) {
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    return null;
  }
  return ['http:', 'https:', 'mailto:'].includes(parsed.protocol) ? parsed.href : null;
}

function link(text, url) {
  const href = safeHref(url);
  if (!href) return document.createTextNode(text === url ? url : `${text} (${url})`);
  return h('a', { href, target: '_blank', rel: 'noopener noreferrer' }, ...inline(text, false));
}

/** Inline Markdown of one block's text, as nodes (`links` false inside a link's text). */
export function inline(text, links = true) {
  if (text.length > MAX_INLINE) return [document.createTextNode(text)];
  const nodes = [];
  let rest = text;
  while (rest) {
    const match = INLINE.exec(rest);
    if (!match) break;
    if (match.index) nodes.push(document.createTextNode(rest.slice(0, match.index)));
    const [whole] = match;
    if (match[1] !== undefined) nodes.push(h('code', { text: match[2].replace(/^ (.*) $/, '$1') }));
    else if (match[3] !== undefined) nodes.push(h('strong', {}, ...inline(match[3], links)));
    else if (match[4] !== undefined) nodes.push(h('em', {}, ...inline(match[4], links)));
    else if (match[5] !== undefined) nodes.push(h('em', {}, ...inline(match[5], links)));
    else if (match[6] !== undefined) {
      nodes.push(links ? link(match[6], match[7]) : document.createTextNode(match[6]));
    } else if (match[8] !== undefined) {
      nodes.push(links ? link(match[8], match[8]) : document.createTextNode(match[8]));
    }
    rest = rest.slice(match.index + whole.length);
  }
  if (rest) nodes.push(document.createTextNode(rest));
  return nodes;
}

/** Lines joined inside one paragraph keep their breaks (agents write lines, not prose). */
function paragraph(lines) {
  const p = h('p');
  lines.forEach((line, i) => {
    if (i) p.append(h('br'));
    p.append(...inline(line));
  });
  return p;
}

function list(items, ordered, start) {
  const el = h(ordered ? 'ol' : 'ul', ordered && start !== 1 ? { start: String(start) } : {});
  for (const item of items) el.append(h('li', {}, ...inline(item)));
  return el;
}

/** Block Markdown of a whole text, as a fragment of nodes. */
export function renderMarkdown(text) {
  const out = document.createDocumentFragment();
  const source = String(text ?? '');
  if (source.length > MAX_INPUT) {
    out.append(h('p', { class: 'plain', text: source }));
    return out;
  }
  const lines = source.replace(/\r\n?/g, '\n').split('\n');
  let para = [];
  const flush = () => {
    if (para.length) out.append(paragraph(para));
    para = [];
  };
  for (let i = 0; i < lines.length;) {
    const line = lines[i];
    const fence = line.match(FENCE);
    if (fence) {
      flush();
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trimStart().startsWith(fence[1])) body.push(lines[i++]);
      i += 1; // the closing fence (or the end of the text)
      out.append(h('pre', { class: 'code', tabindex: '0' }, h('code', { text: body.join('\n') })));
      continue;
    }
    const heading = line.match(HEADING);
    if (heading) {
      flush();
      out.append(h('p', { class: `md-h md-h${Math.min(heading[1].length, 3)}` },
        h('strong', {}, ...inline(heading[2]))));
      i += 1;
      continue;
    }
    const bullet = line.match(BULLET);
    const numbered = line.match(NUMBERED);
    if (bullet || numbered) {
      flush();
      const ordered = !bullet;
      const items = [];
      const start = numbered ? Number(numbered[1]) : 1;
      while (i < lines.length) {
        const m = ordered ? lines[i].match(NUMBERED) : lines[i].match(BULLET);
        if (!m) break;
        items.push(ordered ? m[2] : m[1]);
        i += 1;
      }
      out.append(list(items, ordered, start));
      continue;
    }
    if (!line.trim()) flush();
    else para.push(line);
    i += 1;
  }
  flush();
  return out;
}
