import assert from "node:assert/strict";
import { base64ImageUrl, checkImageUrl, imageTypeOf, isBase64 } from "./image_input.ts";

const b64 = (bytes: number[]) => btoa(String.fromCharCode(...bytes));
const ascii = (text: string) => [...text].map((c) => c.charCodeAt(0));

const PNG = b64([0x89, ...ascii("PNG\r\n\x1a\n"), 0, 0, 0, 13]);
const JPEG = b64([0xff, 0xd8, 0xff, 0xe0, 0, 16]);
const GIF = b64(ascii("GIF89a\x01\x00\x01\x00"));
const WEBP = b64([...ascii("RIFF"), 36, 0, 0, 0, ...ascii("WEBPVP8 ")]);

Deno.test("checkImageUrl takes base64 data:image URLs and http(s) links", () => {
  for (const url of [`data:image/png;base64,${PNG}`, "https://img.example/cat.png", "http://h/x"]) {
    assert.deepEqual(checkImageUrl(url), { url });
  }
});

Deno.test("checkImageUrl refuses other schemes, non-image or non-base64 data URLs, and non-URLs", () => {
  const problems: [string, RegExp][] = [
    ["file:///etc/passwd", /scheme 'file'/],
    ["ftp://h/cat.png", /scheme 'ftp'/],
    ["data:text/plain;base64,aGk=", /data:image\/<type>;base64/],
    ["data:image/png,rawbytes", /data:image\/<type>;base64/],
    ["data:image/png;base64,not base64!", /payload is not base64/],
    ["data:image/png;base64,", /payload is not base64/],
    ["cat.png", /data:image\/\* URL \(base64\) or an http\(s\) URL/],
  ];
  for (const [url, problem] of problems) {
    const checked = checkImageUrl(url);
    assert.ok("problem" in checked, url);
    assert.match(checked.problem, problem, url);
  }
});

Deno.test("isBase64 takes padded and unpadded base64 and refuses impossible lengths", () => {
  assert.ok(isBase64("aGk="));
  assert.ok(isBase64("aGk"));
  assert.ok(!isBase64("a"));
  assert.ok(!isBase64("aGk=x"));
  assert.ok(!isBase64("aG="));
  assert.ok(!isBase64(""));
});

Deno.test("imageTypeOf and base64ImageUrl read PNG, JPEG, GIF and WebP from their magic numbers", () => {
  const cases: [string, string][] = [
    [PNG, "image/png"],
    [JPEG, "image/jpeg"],
    [GIF, "image/gif"],
    [WEBP, "image/webp"],
  ];
  for (const [data, type] of cases) {
    assert.deepEqual(base64ImageUrl(data), { url: `data:${type};base64,${data}` });
  }
  assert.equal(imageTypeOf(new Uint8Array([1, 2, 3])), undefined);
});

Deno.test("base64ImageUrl refuses what is not base64 image bytes, saying why", () => {
  const problems: [string, RegExp][] = [
    [`data:image/png;base64,${PNG}`, /without a data: prefix/],
    ["%%%", /must be base64 image bytes$/],
    [btoa("plain text, not an image"), /not a PNG, JPEG, GIF or WebP image/],
  ];
  for (const [data, problem] of problems) {
    const checked = base64ImageUrl(data);
    assert.ok("problem" in checked, data);
    assert.match(checked.problem, problem);
  }
});
