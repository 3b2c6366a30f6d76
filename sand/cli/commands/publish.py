"""``sand publish VM --issue URL``: a checkout's commits replayed onto a drupal.org issue fork."""

from __future__ import annotations

import argparse
import asyncio
import sys

from sand import activity
from sand.cli.confirm import confirm
from sand.cli.guests import UsageError, say
from sand.cli.waits import shown_while_waiting
from sand.guest.runner import SshRunner
from sand.guest.ssh import where
from sand.verbs.drupal import (
    DrupalSites,
    Issue,
    PublishRefused,
    parse_issue_url,
    read_token,
    token_path,
)
from sand.verbs.forge import GitLab
from sand.verbs.publish import PublishPlan, confirm_and_execute, prepare
from sand.verbs.target import Target, connect, resolve


def run(args: argparse.Namespace) -> int:

    token = read_token(token_path())  # before anything else: no token, no work
    if not args.yes and not sys.stdin.isatty():
        raise PublishRefused(
            "publishing needs a person to confirm, and stdin is not a terminal: run it in a "
            "terminal, or pass --yes to confirm without being asked"
        )
    sites = DrupalSites()
    issue = parse_issue_url(args.issue, sites)
    with shown_while_waiting(args.vm):
        plan = asyncio.run(_prepare_publish(args, issue, GitLab(sites.api)))
    result = confirm_and_execute(
        plan,
        GitLab(sites.api, token),
        out=sys.stdout,
        confirm=lambda q: confirm(q, assumed=args.yes),
        vm=args.vm,
    )
    return 0 if result is not None else 1  # None: the person said no


async def _prepare_publish(args: argparse.Namespace, issue: Issue, forge: GitLab) -> PublishPlan:

    async with resolve(args.manifest, args.vm, say) as target:
        checkout = args.path or _only_repo(target)
        async with connect(target.endpoint) as conn:
            activity.reached()
            return await prepare(
                SshRunner(conn, "publish", where=where(target.endpoint)),
                checkout,
                issue,
                forge,
                branch=args.branch,
                target_branch=args.target_branch,
            )


def _only_repo(target: Target) -> str:
    paths = [r.path for r in target.vm.repos]
    if len(paths) != 1:
        listed = ", ".join(paths) or "none declared"
        raise UsageError(f"name the checkout to publish (the VM's repos: {listed})")
    return paths[0]
