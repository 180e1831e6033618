"""Natural task descriptions for GitHub's MCP catalog, each with the tool meant for it.

Written as a user would phrase a request to an agent, not copied from tool descriptions.
Where two tools of the catalog genuinely serve the request (the catalog has both
``create_issue`` and ``issue_write``), both are accepted.
"""

from __future__ import annotations

TASKS: list[tuple[str, tuple[str, ...]]] = [
    ("show me the open PRs on octocat/hello-world", ("list_pull_requests",)),
    ("file a bug: the login page crashes on Safari", ("create_issue", "issue_write")),
    ("merge PR 42 using squash", ("merge_pull_request",)),
    ("which branches exist in this repo?", ("list_branches",)),
    ("start a new branch called feature/search off main", ("create_branch",)),
    ("what did the last few commits on main change?", ("list_commits",)),
    ("show the diff of commit 3f2a9c1", ("get_commit",)),
    ("open a pull request from my feature branch into main", ("create_pull_request",)),
    ("read the README from the repository", ("get_file_contents",)),
    ("who last touched each line of src/app.py?", ("get_file_blame",)),
    ("fork the upstream repo into my account", ("fork_repository",)),
    ("star the rust-lang/rust repository", ("star_repository",)),
    ("which repositories have I starred?", ("list_starred_repositories",)),
    ("leave a comment on issue 17 saying it is fixed in 2.1", ("add_issue_comment",)),
    ("close issue 88 as not planned", ("update_issue_state", "issue_write")),
    ("change the title of issue 12 to 'Crash on startup'", ("update_issue_title", "issue_write")),
    ("put the bug and regression labels on issue 5", ("update_issue_labels", "issue_write")),
    ("assign issue 9 to alice", ("update_issue_assignees", "issue_write")),
    ("find code that calls parse_config anywhere on GitHub", ("search_code",)),
    ("look for repositories about rust web frameworks", ("search_repositories",)),
    ("find GitHub users named Linus in Portland", ("search_users",)),
    ("why did the CI build fail? get the failing job logs", ("get_job_logs",)),
    ("re-run the failed workflow run 123456", ("actions_run_trigger",)),
    ("list the workflow runs for the deploy pipeline", ("actions_list",)),
    ("are there any Dependabot alerts for vulnerable dependencies?", ("list_dependabot_alerts",)),
    (
        "check whether any secrets or tokens were leaked in the repo",
        ("list_secret_scanning_alerts",),
    ),
    ("list code scanning alerts with high severity", ("list_code_scanning_alerts",)),
    ("what is the latest release of the project?", ("get_latest_release",)),
    ("list all tags of the repository", ("list_tags",)),
    ("show my unread notifications", ("list_notifications",)),
    ("mark all my notifications as read", ("mark_all_notifications_read",)),
    ("who am I logged in as on GitHub?", ("get_me",)),
    ("create a gist with this shell snippet", ("create_gist",)),
    ("ask alice and bob to review PR 31", ("request_pull_request_reviewers",)),
    (
        "approve pull request 31 with a short review",
        ("create_pull_request_review", "pull_request_review_write"),
    ),
    ("get the files changed in pull request 7", ("pull_request_read",)),
    ("update PR 7 with the latest changes from the base branch", ("update_pull_request_branch",)),
    ("mark PR 19 as ready for review instead of draft", ("update_pull_request_draft_state",)),
    ("upload three config files in one commit to the repo", ("push_files",)),
    ("delete the obsolete docs/old.md file", ("delete_file",)),
    ("show the directory structure of the repository", ("get_repository_tree",)),
    ("who are the collaborators on this repository?", ("list_repository_collaborators",)),
    ("list the discussions in the community forum of the repo", ("list_discussions",)),
    ("find issues similar to issue 230, it might be a duplicate", ("find_duplicate",)),
    ("make issue 14 a sub-task of issue 10", ("add_sub_issue", "sub_issue_write")),
    ("search for open issues mentioning memory leak", ("search_issues",)),
    ("create a new private repository called notes", ("create_repository",)),
    ("what labels does the repository use?", ("list_label",)),
]
