/**
 * Signed chain documents: the keys a client trusts, and whether a document's signature
 * holds. Ed25519 from `node:crypto` (no dependency); what a signature covers is
 * `signedContent` (wire.ts). The refusal kinds are the shared vectors' names.
 */

import { createPublicKey, verify, type KeyObject } from "node:crypto";

import { SIGNATURE_ALGORITHM, pyRepr, signedContent } from "./wire.js";

export const UNSIGNED = "unsigned";
export const MALFORMED = "malformed";
export const UNTRUSTED_KEY = "untrusted_key";
export const BAD_SIGNATURE = "bad_signature";
export type RefusalKind = typeof UNSIGNED | typeof MALFORMED | typeof UNTRUSTED_KEY | typeof BAD_SIGNATURE;

export interface SignatureRefused {
  readonly kind: RefusalKind;
  readonly why: string;
}

const PUBLIC_KEY_BYTES = 32;
const SIGNATURE_BYTES = 64;
const SIGNATURE_FIELDS = ["alg", "key_id", "signed_at", "value"] as const;
const BASE64URL = /^[A-Za-z0-9_-]*$/;
const SHOWN_CHARS = 64;

function base64url(text: string): Buffer | null {
  if (!BASE64URL.test(text) || text.length % 4 === 1) return null;
  return Buffer.from(text, "base64url");
}

function shown(keyId: string): string {
  return keyId.length > SHOWN_CHARS ? pyRepr(keyId.slice(0, SHOWN_CHARS) + "...") : pyRepr(keyId);
}

/** The public keys a client trusts, by key id, each loaded once. */
export class TrustedKeys {
  private constructor(private readonly keys: ReadonlyMap<string, KeyObject>) {}

  /** Check the `trustedKeys` option and load its keys; throws naming the bad key id. */
  static load(trustedKeys: unknown): TrustedKeys {
    if (trustedKeys === null || typeof trustedKeys !== "object" || Array.isArray(trustedKeys)) {
      throw new TypeError(
        "trustedKeys must be an object of key id to public key (base64url, as printed by manage.py signing_keys public), or undefined",
      );
    }
    const entries = Object.entries(trustedKeys as Record<string, unknown>);
    if (entries.length === 0) {
      throw new RangeError("trustedKeys is empty: give at least one key, or leave it out to accept unsigned documents");
    }
    const keys = new Map<string, KeyObject>();
    for (const [keyId, text] of entries) {
      if (!keyId.trim()) throw new RangeError(`trustedKeys: key id ${pyRepr(keyId)} must be a non-empty string`);
      if (typeof text !== "string") throw new RangeError(`trustedKeys[${pyRepr(keyId)}] must be a string (base64url)`);
      const raw = base64url(text.trim().replace(/=+$/, ""));
      if (raw === null) throw new RangeError(`trustedKeys[${pyRepr(keyId)}] is not base64url (A-Z, a-z, 0-9, '-', '_')`);
      if (raw.length !== PUBLIC_KEY_BYTES) {
        throw new RangeError(
          `trustedKeys[${pyRepr(keyId)}] is ${raw.length} bytes; an Ed25519 public key is ${PUBLIC_KEY_BYTES} ` +
            "(43 base64url characters, as printed by manage.py signing_keys public)",
        );
      }
      keys.set(keyId, createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: raw.toString("base64url") }, format: "jwk" }));
    }
    return new TrustedKeys(keys);
  }

  get keyIds(): string[] {
    return [...this.keys.keys()].sort();
  }

  /** Why `document` (the JSON object as received) must be refused, or null when it verifies. */
  refusal(document: Record<string, unknown>): SignatureRefused | null {
    const signature = document["signature"];
    if (signature === undefined || signature === null) {
      return {
        kind: UNSIGNED,
        why:
          "unsigned: the document carries no signature, and this client accepts only documents " +
          "signed by a trusted key (trusted_keys); is the control plane signing its documents " +
          "(manage.py signing_keys), or does a proxy or relay on the way strip the signature?",
      };
    }
    const malformed = malformedBecause(signature);
    if (malformed !== null) return { kind: MALFORMED, why: `malformed signature: ${malformed}` };
    const fields = signature as Record<string, string>;
    const key = this.keys.get(fields["key_id"]);
    if (key === undefined) {
      return {
        kind: UNTRUSTED_KEY,
        why:
          `signed by key ${shown(fields["key_id"])}, which this client does not trust (trusted: ${this.keyIds.map(shown).join(", ")}); ` +
          "if the control plane rotated its signing key, add the new public key to trusted_keys " +
          "(manage.py signing_keys public prints it)",
      };
    }
    const value = base64url(fields["value"]) as Buffer;
    if (!verify(null, signedContent(document), key, value)) {
      return {
        kind: BAD_SIGNATURE,
        why:
          `the signature does not verify with trusted key ${shown(fields["key_id"])}: the document was changed ` +
          "after the control plane signed it (by a proxy, relay or cache on the way?), or the public " +
          "key configured under that id is not the control plane's",
      };
    }
    return null;
  }
}

function malformedBecause(signature: unknown): string | null {
  if (signature === null || typeof signature !== "object" || Array.isArray(signature)) {
    const kind = Array.isArray(signature) ? "list" : typeof signature === "string" ? "str" : typeof signature === "number" ? (Number.isInteger(signature) ? "int" : "float") : typeof signature === "boolean" ? "bool" : typeof signature;
    return `'signature' must be an object with ${SIGNATURE_FIELDS.join(", ")}, got ${kind}`;
  }
  const fields = signature as Record<string, unknown>;
  for (const name of SIGNATURE_FIELDS) {
    const field = fields[name];
    if (typeof field !== "string" || !field) return `signature.${name} must be a non-empty string`;
  }
  if (fields["alg"] !== SIGNATURE_ALGORITHM) {
    return (
      `algorithm ${shown(fields["alg"] as string)} is not ${SIGNATURE_ALGORITHM}, the only one this client ` +
      "verifies (upgrade chainclient if the control plane moved to a new one)"
    );
  }
  const value = base64url(fields["value"] as string);
  if (value === null || value.length !== SIGNATURE_BYTES) {
    return `signature.value must be the base64url (no padding) of a ${SIGNATURE_BYTES}-byte Ed25519 signature`;
  }
  return null;
}
