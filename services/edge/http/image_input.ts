/**
 * Images a client sends with a chat, checked at the surface and carried as one URL form: a
 * `data:image/<type>;base64,...` URL (OpenAI's `image_url.url`, with its scheme and type
 * lowercased), or raw base64 bytes turned into such a data URL (Ollama's `images`, which never
 * carry a type: it is read from the bytes' magic number). Only PNG, JPEG, GIF and WebP are
 * taken, and a data URL's bytes must be of the type it declares.
 *
 * An http(s) link is taken only when the operator allows it (`http.allow_image_links`, off by
 * default): the Edge never fetches it, but an OpenAI-compatible or vLLM backend does, from its
 * own network, so a link lets a client make the backend fetch any address it can reach (a
 * cloud metadata endpoint, an internal service). Other schemes (`file:`, `ftp:`) are always
 * refused. The body limit bounds the size.
 * @module
 */

/** A checked image: its URL, or what is wrong with it (the end of a sentence). */
export type CheckedImage = { url: string } | { problem: string };

/** Options of {@linkcode checkImageUrl}. */
export interface ImageUrlOptions {
  /** Accept http(s) links (`http.allow_image_links`); default false: `data:` URLs only. */
  allowLinks?: boolean;
}

/** The image types taken, by the MIME type a data URL declares. */
const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];
const TYPE_LIST = "PNG, JPEG, GIF or WebP";

const DATA_URL = /^data:(image\/[A-Za-z0-9.+-]+);base64,/i;
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** True when `text` is standard base64 (padding optional, as most decoders take it). */
export function isBase64(text: string): boolean {
  if (text === "" || !BASE64.test(text)) return false;
  const bare = text.replace(/=+$/, "");
  return bare.length % 4 !== 1 && (bare.length === text.length || text.length % 4 === 0);
}

/** The image type of the first bytes of an image, by magic number; undefined when unknown. */
export function imageTypeOf(head: Uint8Array): string | undefined {
  const at = (offset: number, ascii: string) =>
    [...ascii].every((ch, i) => head[offset + i] === ch.charCodeAt(0));
  if (head[0] === 0x89 && at(1, "PNG\r\n\x1a\n")) return "image/png";
  if (head[0] === 0xff && head[1] === 0xd8 && head[2] === 0xff) return "image/jpeg";
  if (at(0, "GIF87a") || at(0, "GIF89a")) return "image/gif";
  if (at(0, "RIFF") && at(8, "WEBP")) return "image/webp";
  return undefined;
}

/** The image type of base64 image bytes (valid base64), from their first 12 bytes. */
function base64TypeOf(base64: string): string | undefined {
  // 16 base64 characters are 12 bytes: enough for every magic number above.
  const head = Uint8Array.from(
    atob(base64.slice(0, 16).replace(/=+$/, "")),
    (c) => c.charCodeAt(0),
  );
  return imageTypeOf(head);
}

function checkDataUrl(url: string): CheckedImage {
  const head = DATA_URL.exec(url);
  if (!head) return { problem: "must be a data: URL of the form data:image/<type>;base64,..." };
  const payload = url.slice(head[0].length);
  if (!isBase64(payload)) return { problem: "holds a data: URL whose payload is not base64" };
  const declared = head[1]!.toLowerCase();
  if (!IMAGE_TYPES.includes(declared)) {
    return { problem: `declares ${declared}, which is not a ${TYPE_LIST} image` };
  }
  const actual = base64TypeOf(payload);
  if (actual !== declared) {
    const bytes = actual ?? `not a ${TYPE_LIST} image`;
    return { problem: `declares ${declared} but its bytes are ${bytes}` };
  }
  // Lowercased, so every later check (and each backend) reads the one spelling `data:image/…`.
  return { url: `data:${declared};base64,${payload}` };
}

/**
 * Checks an OpenAI `image_url.url`: a base64 `data:image/*` URL of a PNG, JPEG, GIF or WebP
 * image, or, with `allowLinks`, an http(s) URL.
 */
export function checkImageUrl(url: string, options: ImageUrlOptions = {}): CheckedImage {
  if (url.slice(0, 5).toLowerCase() === "data:") return checkDataUrl(url);
  const expected = options.allowLinks
    ? "must be a data:image/* URL (base64) or an http(s) URL"
    : "must be a data:image/* URL (base64)";
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return { problem: expected };
  }
  const scheme = parsed.protocol.slice(0, -1);
  if (scheme !== "http" && scheme !== "https") {
    return { problem: `${expected}: got scheme '${scheme}'` };
  }
  if (!options.allowLinks) {
    return {
      problem: `${expected}: image links are off on this Edge, as a backend would fetch ` +
        "them from its own network (an operator turns them on with http.allow_image_links)",
    };
  }
  if (parsed.hostname === "") return { problem: "must name a host" };
  return { url };
}

/**
 * Ollama's image (base64 bytes, no `data:` prefix) as a `data:` URL typed by its magic number;
 * PNG, JPEG, GIF and WebP are known.
 */
export function base64ImageUrl(base64: string): CheckedImage {
  if (!isBase64(base64)) {
    return {
      problem: base64.slice(0, 5).toLowerCase() === "data:"
        ? "must be base64 image bytes without a data: prefix"
        : "must be base64 image bytes",
    };
  }
  const type = base64TypeOf(base64);
  if (!type) return { problem: `is not a ${TYPE_LIST} image` };
  return { url: `data:${type};base64,${base64}` };
}
