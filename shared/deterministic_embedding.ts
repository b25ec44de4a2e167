/**
 * Deterministic embedding vectors: the one generator behind the mock adapter's embedding runs
 * and the fake model servers' embedding endpoints, so that a test can compute exactly what
 * either answers, even after the vector crossed a float32 wire.
 * @module
 */

/**
 * The vector for `text`: `dimensions` values, value `i` drawn from an xorshift32 seeded by the
 * text's FNV-1a hash and `i` (so a shorter vector is a prefix of a longer one before scaling),
 * scaled to length 1 and rounded to float32. The same text always embeds to the same vector and
 * different texts almost never do.
 */
export function deterministicEmbedding(text: string, dimensions: number): number[] {
  let h = 0x811c9dc5;
  for (const byte of new TextEncoder().encode(text)) h = Math.imul(h ^ byte, 0x01000193);
  const raw = Array.from({ length: dimensions }, (_, i) => {
    let x = (h ^ Math.imul(i + 1, 0x9e3779b1)) | 1;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 31 - 1;
  });
  return unitFloat32(raw);
}

/** The first `dimensions` values of `vector`, scaled to length 1 again (as Ollama shortens). */
export function shortenEmbedding(vector: number[], dimensions: number): number[] {
  return unitFloat32(vector.slice(0, dimensions));
}

function unitFloat32(values: number[]): number[] {
  const norm = Math.sqrt(values.reduce((sum, v) => sum + v * v, 0)) || 1;
  return values.map((v) => Math.fround(v / norm));
}
