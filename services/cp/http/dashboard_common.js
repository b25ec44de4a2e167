// What every part of the dashboard shares: DOM helpers, the access box, and the token-carrying
// fetch of the Control Plane's API (401/403 become clear messages). All text goes in via
// textContent, never as markup.

/** The first element matching `sel`. */
export const $ = (sel) => document.querySelector(sel);

/** The token input; its value is the access token every request carries. */
export const tokenInput = $("#token");

/** An element with attributes (`class` as className) and children (nodes or text). */
export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) {
    if (c === "" || c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

/** Shows `text` in the access box, styled `kind` (muted by default). */
export function showAccess(text, kind) {
  const box = $("#access");
  box.textContent = text;
  box.className = kind || "muted";
}

/** An HTTP error of the API, with its status and the error body's code. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** A fetch of the Control Plane's API with the token; JSON unless `text` is set. */
export async function api(path, init = {}) {
  const res = await fetch(path, {
    ...init,
    headers: { ...init.headers, authorization: `Bearer ${tokenInput.value.trim()}` },
  });
  if (res.status === 401) {
    showAccess("Token refused (401): paste a valid access token.", "denied");
    throw new ApiError(401, "UNAUTHENTICATED", "unauthenticated");
  }
  if (res.status === 403) {
    const body = await res.json().catch(() => ({}));
    const message = (body.error && body.error.message) || "forbidden";
    showAccess(`Not allowed (403): ${message}`, "denied");
    throw new ApiError(403, "PERMISSION_DENIED", message);
  }
  if (!res.ok) {
    const body = await res.json().catch(() => ({}));
    const e = body.error || {};
    throw new ApiError(res.status, e.code || "", e.message || `HTTP ${res.status}`);
  }
  if (init.text) return { text: await res.text(), headers: res.headers };
  return await res.json();
}

/** A time of day from ms since the epoch (a string or number). */
export function clock(ms) {
  const n = Number(ms);
  return n > 0 ? new Date(n).toLocaleTimeString() : "–";
}

/** A duration in ms as text. */
export function duration(ms) {
  const n = Number(ms);
  if (!(n >= 0)) return "–";
  return n < 1000 ? `${Math.round(n)} ms` : `${(n / 1000).toFixed(n < 10_000 ? 2 : 0)} s`;
}
