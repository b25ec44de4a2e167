import assert from "node:assert/strict";
import { base64ImageUrl, checkImageUrl, imageTypeOf, isBase64 } from "./image_input.ts";

const b64 = (bytes: number[]) => btoa(String.fromCharCode(...bytes));
const ascii = (text: string) => [...text].map((c) => c.charCodeAt(0));

const PNG = b64([0x89, ...ascii("PNG\r\n\x1a\n"), 0, 0, 0, 13]);
const JPEG = b64([0xff, 0xd8, 0xff, 0xe0, 0, 16]);
const GIF = b64(ascii("GIF89a\x01\x00\x01\x00"));
const WEBP = b64([...ascii("RIFF"), 36, 0, 0, 0, ...ascii("WEBPVP8 ")]);

Deno.test("checkImageUrl takes base64 data:image URLs, and http(s) links only when allowed", () => {
  for (const [data, type] of [[PNG, "png"], [JPEG, "jpeg"], [GIF, "gif"], [WEBP, "webp"]]) {
    const url = `data:image/${type};base64,${data}`;
    assert.deepEqual(checkImageUrl(url), { url });
  }
  for (const url of ["https://img.example/cat.png", "http://h/x"]) {
    assert.deepEqual(checkImageUrl(url, { allowLinks: true }), { url });
    const refused = checkImageUrl(url);
    assert.ok("problem" in refused, url);
    assert.match(refused.problem, /image links are off on this Edge/);
    assert.match(refused.problem, /http\.allow_image_links/);
  }
});

Deno.test("checkImageUrl lowercases a data: URL's scheme and type, so later checks read one spelling", () => {
  assert.deepEqual(checkImageUrl(`DATA:IMAGE/PNG;BASE64,${PNG}`), {
    url: `data:image/png;base64,${PNG}`,
  });
  assert.deepEqual(checkImageUrl(`Data:image/Jpeg;base64,${JPEG}`), {
    url: `data:image/jpeg;base64,${JPEG}`,
  });
});

Deno.test("checkImageUrl refuses a data: URL whose bytes are not the image type it declares", () => {
  const problems: [string, RegExp][] = [
    [`data:image/png;base64,${JPEG}`, /declares image\/png but its bytes are image\/jpeg/],
    [`data:image/gif;base64,${btoa("plain text here")}`, /bytes are not a PNG, JPEG, GIF or WebP/],
    [`data:image/svg+xml;base64,${btoa("<svg/>")}`, /declares image\/svg\+xml, which is not a/],
    [`data:image/bmp;base64,${PNG}`, /declares image\/bmp, which is not a/],
  ];
  for (const [url, problem] of problems) {
    const checked = checkImageUrl(url);
    assert.ok("problem" in checked, url);
    assert.match(checked.problem, problem, url);
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
    ["cat.png", /must be a data:image\/\* URL \(base64\)$/],
  ];
  for (const [url, problem] of problems) {
    const checked = checkImageUrl(url);
    assert.ok("problem" in checked, url);
    assert.match(checked.problem, problem, url);
  }
  const checked = checkImageUrl("cat.png", { allowLinks: true });
  assert.ok("problem" in checked);
  assert.match(checked.problem, /data:image\/\* URL \(base64\) or an http\(s\) URL/);
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
