/**
 * Images a client sends with a chat, checked at the surface and carried as one URL form: a
 * `data:image/<type>;base64,...` URL or an http(s) link (OpenAI's `image_url.url`), or raw
 * base64 bytes turned into such a data URL (Ollama's `images`, which never carry a type: it is
 * read from the bytes' magic number). Other schemes (`file:`, `ftp:`) are refused: the Node
 * would otherwise be asked to read what the client names. The body limit bounds the size.
 * @module
 */

/** A checked image: its URL, or what is wrong with it (the end of a sentence). */
export type CheckedImage = { url: string } | { problem: string };

const DATA_URL = /^data:(image\/[A-Za-z0-9.+-]+);base64,/i;
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** True when `text` is standard base64 (padding optional, as most decoders take it). */
export function isBase64(text: string): boolean {
  if (text === "" || !BASE64.test(text)) return false;
  const bare = text.replace(/=+$/, "");
  return bare.length % 4 !== 1 && (bare.length === text.length || text.length % 4 === 0);
}

/** Checks an OpenAI `image_url.url`: a base64 `data:image/*` URL or an http(s) URL. */
export function checkImageUrl(url: string): CheckedImage {
  if (url.slice(0, 5).toLowerCase() === "data:") {
    const head = DATA_URL.exec(url);
    if (!head) return { problem: "must be a data: URL of the form data:image/<type>;base64,..." };
    if (!isBase64(url.slice(head[0].length))) {
      return { problem: "holds a data: URL whose payload is not base64" };
    }
    return { url };
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return { problem: "must be a data:image/* URL (base64) or an http(s) URL" };
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
    return {
      problem: `must be a data:image/* URL (base64) or an http(s) URL: got scheme '${
        parsed.protocol.slice(0, -1)
      }'`,
    };
  }
  if (parsed.hostname === "") return { problem: "must name a host" };
  return { url };
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

/**
 * Ollama's image (base64 bytes, no `data:` prefix) as a `data:` URL typed by its magic number;
 * PNG, JPEG, GIF and WebP are known.
 */
export function base64ImageUrl(base64: string): CheckedImage {
  if (!isBase64(base64)) {
    return {
      problem: base64.startsWith("data:")
        ? "must be base64 image bytes without a data: prefix"
        : "must be base64 image bytes",
    };
  }
  // 16 base64 characters are 12 bytes: enough for every magic number above.
  const head = Uint8Array.from(
    atob(base64.slice(0, 16).replace(/=+$/, "")),
    (c) => c.charCodeAt(0),
  );
  const type = imageTypeOf(head);
  if (!type) return { problem: "is not a PNG, JPEG, GIF or WebP image" };
  return { url: `data:${type};base64,${base64}` };
}
