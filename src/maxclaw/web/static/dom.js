// Small DOM helpers. Text always goes in through textContent: nothing a server or a model
// wrote is ever parsed as HTML.

/** Build an element: h('button', {class: 'x', onclick: f, 'aria-label': 'y'}, 'text', child). */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'text') el.textContent = value;
    else if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (value === true) el.setAttribute(key, '');
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

/** Replace every child of `el`. */
export function replaceChildren(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

// Words and times in his locale (i18n.js, a classic script loaded before the modules).
const i18n = () => self.MaxClawI18n;

/** The catalogue's message `key` in the chosen locale, `{name}`s filled from `params`. */
export function t(key, params) {
  return i18n().t(key, params);
}

/** "14:05" today, "Mar 3, 14:05" (or "3月3日 14:05") otherwise. */
export function formatTime(iso) {
  return i18n().formatTime(iso);
}

/** "5 minutes ago", "now", "in 2 hours", in the chosen locale. */
export function relativeTime(iso) {
  return i18n().relativeTime(iso);
}

/** A stable, short signature of a value (to tell whether a view must be rebuilt). */
export function signature(value) {
  return JSON.stringify(value);
}
