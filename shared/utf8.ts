/**
 * The UTF-8 size of a string, and its longest prefix within a byte budget, without encoding it:
 * for bounds checked on text that is encoded once later anyway (a SQLite bind, a protobuf
 * frame), so a check costs no copy. A lone surrogate counts as U+FFFD's three bytes, as the
 * encoders write it.
 * @module
 */

/** How many bytes `text` takes as UTF-8 (a lone surrogate counts as U+FFFD's three). */
export function utf8Length(text: string): number {
  let n = text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) n += 1;
    else if (c >= 0xd800 && c <= 0xdbff && isLow(text.charCodeAt(i + 1))) {
      n += 2; // the pair's two halves are 4 bytes in all
      i++;
    } else n += 2;
  }
  return n;
}

/** The longest prefix of `text` of at most `maxBytes` UTF-8 bytes that splits no character. */
export function cutToBytes(text: string, maxBytes: number): string {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    const pair = c >= 0xd800 && c <= 0xdbff && isLow(text.charCodeAt(i + 1));
    const size = c < 0x80 ? 1 : c < 0x800 ? 2 : pair ? 4 : 3;
    if (bytes + size > maxBytes) return text.slice(0, i);
    bytes += size;
    if (pair) i++;
  }
  return text;
}

function isLow(c: number): boolean {
  return c >= 0xdc00 && c <= 0xdfff;
}
