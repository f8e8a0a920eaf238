"""What signing costs a change and what verifying costs a service (issue 37's bars: signing
adds <= 1 ms to a change, verification <= 200 us per applied document).

On a scratch PostgreSQL database with the example presets: ``--changes`` changes (a pin, then
a revert, in turn) through ``services`` as the API makes them, in rounds that alternate
between no signing key and a signing key, so the machine's drift lands on both sides; each
change signs its notification (``read_path.notifications.encode_payload``, in the change's
transaction) and its answer (``http_api.chains.document_response`` does). Then the
signature alone, and the SDK's side: ``TrustedKeys.refusal`` (the verification a client with
``trusted_keys`` adds before it applies a document) against ``ChainDocument.from_json`` (what
every applied document already costs).

    python bench/signing.py [--changes 400] [--admin-url postgres://postgres@127.0.0.1:5432/postgres]

Ends with one line of key=value figures.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "sdk"))
from read_throughput import python_reference_us  # noqa: E402

ROUNDS = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=400, help="changes timed on each side")
    parser.add_argument("--admin-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    import psycopg

    name = f"bench_signing_{os.getpid()}"
    with psycopg.connect(args.admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        run(f"{args.admin_url.rsplit('/', 1)[0]}/{name}", args.changes)
    finally:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(args.admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(database_url: str, changes: int) -> None:
    os.environ.update(
        DATABASE_URL=database_url,
        DJANGO_SETTINGS_MODULE="controlplane.settings",
        DEBUG="false",
        LOG_LEVEL="ERROR",
        SECRET_KEY=os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("sync_presets", verbosity=0, stdout=open(os.devnull, "w"))
    change_us = changes_with_and_without_a_key(changes)
    sign_us, verify_us, parse_us = signature_alone()
    added = change_us["signed"] - change_us["unsigned"]
    print(f"a change, no signing key:   {change_us['unsigned']:8.0f} us (median of {changes})")
    print(f"a change, signed:           {change_us['signed']:8.0f} us (median of {changes})")
    print(f"signing added to a change:  {added:8.0f} us (bar: 1,000)")
    print(f"one signature:              {sign_us:8.1f} us (a change makes two: notification and answer)")
    print(f"verifying a document (SDK): {verify_us:8.1f} us (bar: 200)")
    print(f"parsing a document (SDK):   {parse_us:8.1f} us (what every applied document already costs)")
    print(
        f"change_unsigned_us={change_us['unsigned']:.0f} change_signed_us={change_us['signed']:.0f} "
        f"signing_added_us={added:.0f} sign_us={sign_us:.1f} verify_us={verify_us:.1f} parse_us={parse_us:.1f} "
        f"python_ref_us={python_reference_us()}"
    )


def changes_with_and_without_a_key(changes: int) -> dict[str, float]:
    from http_api.chains import document_response
    from presets import services, signing
    from presets.models import SigningKey

    signing.create_key(actor="bench")
    key = SigningKey.objects.get()
    timings: dict[str, list[float]] = {"unsigned": [], "signed": []}
    per_round = max(2, changes // ROUNDS)
    for round_number in range(ROUNDS * 2):
        side = "signed" if round_number % 2 else "unsigned"
        # No key signs while the key is set aside (a key with a retires_at never signs).
        SigningKey.objects.filter(pk=key.pk).update(retires_at=None if side == "signed" else key.created_at)
        signing.forget_signer()
        for n in range(per_round):
            started = time.perf_counter()
            if n % 2 == 0:
                selection = services.select_preset(chain="chat", preset="pin_secondary", actor="bench", reason="bench")
            else:
                selection = services.revert_to_default(chain="chat", actor="bench", reason="bench")
            document_response(selection)
            timings[side].append((time.perf_counter() - started) * 1e6)
        if services.revert_expired_and_read(chain="chat").is_pinned:
            services.revert_to_default(chain="chat", actor="bench", reason="bench")
    return {side: statistics.median(values) for side, values in timings.items()}


def signature_alone() -> tuple[float, float, float]:
    from chainclient.signatures import TrustedKeys
    from chainclient.types import ChainDocument
    from presets import services, signing

    signer = signing.current_signer()
    assert signer is not None
    document = services.revert_expired_and_read(chain="chat").to_document(epoch=0)
    signed = json.loads(json.dumps(signer.sign(document)))
    keys = TrustedKeys.load({key.key_id: key.public_key for key in signing.trusted_keys()})
    assert keys.refusal(signed) is None

    def best(statement: object, number: int = 2000) -> float:
        return min(timeit.repeat(statement, repeat=5, number=number)) / number * 1e6  # type: ignore[arg-type]

    return (
        best(lambda: signer.sign(document)),
        best(lambda: keys.refusal(signed)),
        best(lambda: ChainDocument.from_json(signed)),
    )


if __name__ == "__main__":
    main()
