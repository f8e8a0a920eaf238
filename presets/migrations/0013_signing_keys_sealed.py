# Private signing keys sealed outside the database's reach (issue 53).
#
# Every key's private half, stored in clear until now, is sealed (presets/key_sealing.py) with
# this process's sealing key: SIGNING_KEYS_SECRET, or one derived from SECRET_KEY. Key ids and
# public keys do not change, so services' trusted_keys keep verifying every document. Run the
# migration with the secret the web processes will have (the release step's environment).
#
# Reversible: going back opens every key (with the secret it was sealed with, or a
# SIGNING_KEYS_SECRET_FALLBACKS entry) and stores it in clear again; a key this process cannot
# open stops the reverse with the key sealing's message, and nothing changes.

import base64

from django.db import migrations, models

from presets import key_sealing


def _encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def seal_clear_keys(apps, schema_editor):
    SigningKey = apps.get_model("presets", "SigningKey")
    db = schema_editor.connection.alias
    for key in SigningKey.objects.using(db).order_by("id"):
        key.sealed_private_key, key.sealed_with = key_sealing.seal(_decode(key.private_key), key_id=key.key_id)
        key.private_key = ""
        key.save(update_fields=["sealed_private_key", "sealed_with", "private_key"])


def open_sealed_keys(apps, schema_editor):
    SigningKey = apps.get_model("presets", "SigningKey")
    db = schema_editor.connection.alias
    for key in SigningKey.objects.using(db).order_by("id"):
        raw = key_sealing.unseal(key.sealed_private_key, sealed_with=key.sealed_with, key_id=key.key_id)
        key.private_key = _encode(raw)
        key.sealed_private_key = key.sealed_with = ""
        key.save(update_fields=["sealed_private_key", "sealed_with", "private_key"])


class Migration(migrations.Migration):
    dependencies = [
        ("presets", "0012_token_evidence"),
    ]

    operations = [
        migrations.AddField(
            model_name="signingkey",
            name="sealed_private_key",
            field=models.TextField(default=""),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="signingkey",
            name="sealed_with",
            field=models.CharField(default="", max_length=16),
            preserve_default=False,
        ),
        # A default for the clear column only so that going back can add it to existing rows.
        migrations.AlterField(
            model_name="signingkey",
            name="private_key",
            field=models.CharField(default="", max_length=64),
        ),
        migrations.RunPython(seal_clear_keys, open_sealed_keys, elidable=False),
        migrations.RemoveField(
            model_name="signingkey",
            name="private_key",
        ),
        migrations.AlterField(
            model_name="accesschange",
            name="action",
            field=models.CharField(
                choices=[
                    ("token_created", "Token Created"),
                    ("token_revoked", "Token Revoked"),
                    ("role_granted", "Role Granted"),
                    ("role_revoked", "Role Revoked"),
                    ("user_created", "User Created"),
                    ("user_deactivated", "User Deactivated"),
                    ("user_reactivated", "User Reactivated"),
                    ("user_deleted", "User Deleted"),
                    ("staff_granted", "Staff Granted"),
                    ("staff_revoked", "Staff Revoked"),
                    ("superuser_granted", "Superuser Granted"),
                    ("superuser_revoked", "Superuser Revoked"),
                    ("identity_linked", "Identity Linked"),
                    ("identity_unlinked", "Identity Unlinked"),
                    ("key_created", "Key Created"),
                    ("key_activated", "Key Activated"),
                    ("key_retired", "Key Retired"),
                    ("key_resealed", "Key Resealed"),
                ],
                max_length=20,
            ),
        ),
    ]
