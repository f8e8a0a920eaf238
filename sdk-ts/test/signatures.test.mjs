// The signed-document vectors every client shares (../sdk/tests/vectors/signed_documents.json):
// the bytes a signature covers, byte for byte, and each case's verdict.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { TrustedKeys, canonicalJson, signedContent } from "../dist/index.js";

const VECTORS = JSON.parse(readFileSync(new URL("../../sdk/tests/vectors/signed_documents.json", import.meta.url), "utf8"));
const keys = TrustedKeys.load(VECTORS.trusted_keys);

for (const vector of VECTORS.cases) {
  test(`signed document ${vector.name}: ${vector.verdict}`, () => {
    if (vector.signed_content !== undefined && vector.signed_content !== null) {
      assert.equal(signedContent(vector.document).toString("ascii"), vector.signed_content);
    }
    assert.equal(keys.refusal(vector.document)?.kind ?? "valid", vector.verdict);
  });
}

test("canonical JSON escapes non-ASCII as Python's ensure_ascii does", () => {
  assert.equal(canonicalJson({ b: "vendor_a outage \u2014 ok", a: [1, { d: "\u00e9", c: "\ud83d\ude00" }] }),
    '{"a":[1,{"c":"\\ud83d\\ude00","d":"\\u00e9"}],"b":"vendor_a outage \\u2014 ok"}');
});

test("a key that is not 32 bytes of base64url is refused, naming its id", () => {
  assert.throws(() => TrustedKeys.load({ "k-1": "abc" }), /trustedKeys\['k-1'\] is 2 bytes/);
  assert.throws(() => TrustedKeys.load({ "k-1": "not base64!" }), /not base64url/);
  assert.throws(() => TrustedKeys.load({}), /empty/);
});
