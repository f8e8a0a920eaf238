"""Sign-in identities (presets.SignInIdentity): single sign-on finds a person's account by the
provider's issuer and subject, never by the username alone; two more access history actions
record linking and unlinking.

The accounts single sign-on made before this kept no identity, and the provider's subject for
them was never stored, so no migration can link them. Left unlinked, each of those people would
be refused until an administrator linked them; instead this marks them ``unclaimed`` (an
identity row with that issuer, their username as its subject) and their next sign-in binds the
account to the identity that signs in, once, recorded in the access history. Marked are the
accounts single sign-on could sign in to until now (no usable password: single sign-on never
signed in to any other) that it made (the access history's ``user_created`` by ``sso:...``) or
that someone has signed in to (without a password, that was single sign-on or the proxy).
Accounts without a usable password that nobody has ever signed in to are not marked: an
administrator links them (the admin, "Sign-in identities"). An administrator may delete a mark
to have its account refused until linked.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models
from django.db.models import Q

# As in presets/models.py (UNCLAIMED_ISSUER); a migration keeps its own copy.
UNCLAIMED_ISSUER = "unclaimed"
# Django's mark of a password set unusable (django.contrib.auth.hashers.UNUSABLE_PASSWORD_PREFIX).
UNUSABLE_PASSWORD_PREFIX = "!"
ACTIONS = [
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
]


def mark_unclaimed(apps, schema_editor):  # type: ignore[no-untyped-def]
    User = apps.get_model("auth", "User")
    AccessChange = apps.get_model("presets", "AccessChange")
    SignInIdentity = apps.get_model("presets", "SignInIdentity")
    made_by_sso = AccessChange.objects.filter(action="user_created", actor__startswith="sso:").values("subject")
    accounts = User.objects.filter(password__startswith=UNUSABLE_PASSWORD_PREFIX).filter(
        Q(username__in=made_by_sso) | Q(last_login__isnull=False)
    )
    SignInIdentity.objects.bulk_create(
        [
            SignInIdentity(issuer=UNCLAIMED_ISSUER, subject=username, user_id=pk)
            for pk, username in accounts.order_by("pk").values_list("pk", "username")
        ],
        ignore_conflicts=True,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("presets", "0007_epoch_row"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.AlterField(
            model_name="accesschange",
            name="action",
            field=models.CharField(choices=ACTIONS, max_length=20),
        ),
        migrations.CreateModel(
            name="SignInIdentity",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("issuer", models.CharField(max_length=255)),
                ("subject", models.CharField(max_length=255)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="sign_in_identities",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "verbose_name": "sign-in identity",
                "verbose_name_plural": "sign-in identities",
                "ordering": ["issuer", "subject"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("issuer", "subject"),
                        name="presets_identity_once",
                        violation_error_message="This identity is linked to an account already: unlink it there first.",
                    ),
                    models.UniqueConstraint(
                        fields=("issuer", "user"),
                        name="presets_identity_one_per_issuer",
                        violation_error_message="This account is linked to an identity at this issuer already.",
                    ),
                ],
            },
        ),
        migrations.RunPython(mark_unclaimed, migrations.RunPython.noop),
    ]
