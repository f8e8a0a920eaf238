"""Link a Slack user to a control-plane account (docs/on-call.md, "Acting from Slack"): what
they do from Slack is done as that account, with its role, in history as ``slack:<username>``.
Recorded in the access history, like every identity link."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import IntegrityError, transaction

from audit.slack import issuer_of
from commands.operations import actor_from, add_actor_argument
from presets.access_history import link_identity, unlink_identity
from presets.models import SignInIdentity


class Command(BaseCommand):
    help = (
        "Link the Slack user --slack-user (an id like U024BE7LH) of workspace --team (T...) to the "
        "account USERNAME, so their Slack buttons and /chains act as it; --unlink undoes it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", metavar="USERNAME")
        parser.add_argument("--team", required=True, help="the Slack workspace's id (T...)")
        parser.add_argument("--slack-user", required=True, help="the Slack user's id (U... or W...)")
        parser.add_argument("--unlink", action="store_true", help="remove the link instead")
        add_actor_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        team, slack_user = options["team"].strip(), options["slack_user"].strip()
        if not team.isalnum() or not slack_user.isalnum():
            raise CommandError("--team and --slack-user are Slack ids: letters and digits (T024BE7LD, U024BE7LH)")
        user = User.objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no account named {options['username']!r}")
        actor, issuer = actor_from(options), issuer_of(team)
        if options["unlink"]:
            identity = SignInIdentity.objects.filter(issuer=issuer, subject=slack_user, user=user).first()
            if identity is None:
                raise CommandError(f"{user.username} is not linked to Slack user {slack_user} of {team}")
            unlink_identity(identity=identity, actor=actor)
            self.stdout.write(f"unlinked Slack user {slack_user} of {team} from {user.username}")
            return
        try:
            with transaction.atomic():
                link_identity(user=user, issuer=issuer, subject=slack_user, actor=actor, how="admin")
        except IntegrityError:
            taken = SignInIdentity.objects.filter(issuer=issuer, subject=slack_user).select_related("user").first()
            whose = f"to {taken.user.username}" if taken else f"({user.username} has another Slack user of {team})"
            raise CommandError(f"Slack user {slack_user} of {team} is linked already {whose}: unlink first") from None
        self.stdout.write(f"linked Slack user {slack_user} of {team} to {user.username}")
