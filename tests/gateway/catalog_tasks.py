"""Task descriptions for every catalog behind one gateway, each with the tools meant for it.

Written as a user would phrase a request to an agent, before any ranking was looked at
(the tool names were known, the rankings were not). Tools are gateway names
(``server__tool``, servers named by :data:`SERVERS`). Where several tools of the
combined catalog genuinely serve a request (a browser task served by Playwright or by
Chrome DevTools), each is accepted.

- :data:`TASKS`: one request, one intended tool (any of the alternatives).
- :data:`MULTI_STEP`: a whole multi-step task passed as one query; each step is a tuple of
  alternatives, and the task is found when every step has one of them in the top 10.
"""

from __future__ import annotations

#: catalog file stem -> the server name it is mounted under
SERVERS: dict[str, str] = {
    "chrome-devtools-mcp": "chrome",
    "github-mcp-server": "github",
    "mcp-server-git": "git",
    "mcp-server-kubernetes": "kubernetes",
    "notion-mcp-server": "notion",
    "playwright-mcp": "playwright",
    "server-everything": "everything",
    "server-filesystem": "filesystem",
    "server-memory": "memory",
}

Step = tuple[str, ...]

_NAV = ("playwright__browser_navigate", "chrome__navigate_page")
_SHOT = ("playwright__browser_take_screenshot", "chrome__take_screenshot")
_CLICK = ("playwright__browser_click", "chrome__click")
_FORM = ("playwright__browser_fill_form", "chrome__fill_form")
_TYPE = ("playwright__browser_type", "chrome__type_text", "chrome__fill")
_KEY = ("playwright__browser_press_key", "chrome__press_key")
_CONSOLE = ("playwright__browser_console_messages", "chrome__list_console_messages")
_NETWORK = ("playwright__browser_network_requests", "chrome__list_network_requests")
_DIALOG = ("playwright__browser_handle_dialog", "chrome__handle_dialog")
_WAIT = ("playwright__browser_wait_for", "chrome__wait_for")
_READ = ("filesystem__read_text_file", "filesystem__read_file")
_NEW_ISSUE = ("github__create_issue", "github__issue_write")

TASKS: list[tuple[str, Step]] = [
    # filesystem
    ("read the contents of config/settings.yaml on disk", _READ),
    ("show me the image at assets/logo.png", ("filesystem__read_media_file",)),
    ("open notes.md and todo.md together", ("filesystem__read_multiple_files",)),
    ("save this text as a new file report.txt in the workspace", ("filesystem__write_file",)),
    ("replace the word 'foo' with 'bar' in src/main.py", ("filesystem__edit_file",)),
    ("make a folder called build/output", ("filesystem__create_directory",)),
    (
        "what files are in the docs folder?",
        ("filesystem__list_directory", "filesystem__list_directory_with_sizes"),
    ),
    ("which files in downloads are the biggest?", ("filesystem__list_directory_with_sizes",)),
    ("give me a recursive tree view of the src directory as JSON", ("filesystem__directory_tree",)),
    ("rename draft.txt to final.txt", ("filesystem__move_file",)),
    ("find all files matching *.log under /var/app", ("filesystem__search_files",)),
    (
        "when was data.csv last modified and how large is it?",
        ("filesystem__get_file_info",),
    ),
    ("which directories am I allowed to access?", ("filesystem__list_allowed_directories",)),
    # memory (knowledge graph)
    ("remember a new person, Alice, who is a software engineer", ("memory__create_entities",)),
    ("record in memory that Alice works for Acme", ("memory__create_relations",)),
    ("add the fact that Bob prefers tea to what we know about Bob", ("memory__add_observations",)),
    ("forget everything about the entity ProjectX", ("memory__delete_entities",)),
    ("remove the observation that Bob lives in Paris", ("memory__delete_observations",)),
    ("Alice no longer manages Bob; delete that link", ("memory__delete_relations",)),
    ("dump the whole knowledge graph", ("memory__read_graph",)),
    ("search the knowledge graph for anything about coffee", ("memory__search_nodes",)),
    ("look up the nodes named Alice and Bob", ("memory__open_nodes",)),
    # local git
    ("what's the state of my working tree: modified and untracked files?", ("git__git_status",)),
    ("show changes I haven't staged yet", ("git__git_diff_unstaged",)),
    ("show what's staged for the next commit", ("git__git_diff_staged",)),
    ("compare the current branch with the develop branch", ("git__git_diff",)),
    ("commit the staged changes with message 'fix typo'", ("git__git_commit",)),
    ("stage src/app.py for commit", ("git__git_add",)),
    ("unstage everything I added", ("git__git_reset",)),
    ("show the commit history of the local repository", ("git__git_log",)),
    ("create a local branch named hotfix from main", ("git__git_create_branch",)),
    ("switch to the release branch", ("git__git_checkout",)),
    ("show the contents of commit abc123 in the local repo", ("git__git_show",)),
    ("list the local branches", ("git__git_branch",)),
    # kubernetes
    ("list all pods in the staging namespace", ("kubernetes__kubectl_get",)),
    (
        "describe the deployment web-frontend to see why it is failing",
        ("kubernetes__kubectl_describe",),
    ),
    ("apply this YAML manifest to the cluster", ("kubernetes__kubectl_apply",)),
    ("delete the pod crashloop-123", ("kubernetes__kubectl_delete",)),
    ("create a new namespace called testing", ("kubernetes__kubectl_create",)),
    ("show the logs of the api-server pod", ("kubernetes__kubectl_logs",)),
    ("scale the worker deployment to 5 replicas", ("kubernetes__kubectl_scale",)),
    ("patch the service to change its port", ("kubernetes__kubectl_patch",)),
    ("roll back the deployment to the previous revision", ("kubernetes__kubectl_rollout",)),
    ("switch kubectl to the production cluster context", ("kubernetes__kubectl_context",)),
    ("explain what fields a CronJob resource has", ("kubernetes__explain_resource",)),
    ("install the nginx-ingress helm chart", ("kubernetes__install_helm_chart",)),
    ("upgrade the prometheus helm release to a new version", ("kubernetes__upgrade_helm_chart",)),
    ("remove the redis helm release", ("kubernetes__uninstall_helm_chart",)),
    ("cordon and drain node worker-2 for maintenance", ("kubernetes__node_management",)),
    ("forward local port 8080 to the grafana pod", ("kubernetes__port_forward",)),
    ("stop the port forwarding", ("kubernetes__stop_port_forward",)),
    ("run a shell command inside the database pod", ("kubernetes__exec_in_pod",)),
    ("which resource types does the cluster API support?", ("kubernetes__list_api_resources",)),
    ("is the kubernetes server reachable?", ("kubernetes__ping",)),
    # notion
    ("add a comment to a notion page", ("notion__API-create-a-comment",)),
    ("who is the bot user of this notion integration?", ("notion__API-get-self",)),
    ("list all users in the notion workspace", ("notion__API-get-users",)),
    ("search notion for pages titled roadmap", ("notion__API-post-search",)),
    ("get the blocks inside this notion page", ("notion__API-get-block-children",)),
    ("append a paragraph to the end of a notion page", ("notion__API-patch-block-children",)),
    ("delete a block from a notion page", ("notion__API-delete-a-block",)),
    ("create a new page in notion under the projects page", ("notion__API-post-page",)),
    ("change the status property of a notion page", ("notion__API-patch-page",)),
    ("query the tasks database for items due this week", ("notion__API-query-data-source",)),
    ("move a notion page to another parent", ("notion__API-move-page",)),
    ("get a notion page as markdown", ("notion__API-retrieve-page-markdown",)),
    ("read the comments on a notion page", ("notion__API-retrieve-a-comment",)),
    (
        "get the details of a notion database",
        ("notion__API-retrieve-a-database", "notion__API-retrieve-a-data-source"),
    ),
    ("edit the text of a single notion block", ("notion__API-update-a-block",)),
    # browsers (Playwright or Chrome DevTools)
    ("go to https://example.com in the browser", _NAV),
    ("take a screenshot of the current page", _SHOT),
    ("click the Sign in button", _CLICK),
    ("fill in the login form with username and password", _FORM),
    ("type 'hello' into the search box", _TYPE),
    ("press the Enter key", _KEY),
    ("show me the browser console errors", _CONSOLE),
    ("what network requests did the page make?", _NETWORK),
    ("accept the alert dialog that popped up", _DIALOG),
    (
        "run some javascript on the page to get document.title",
        ("playwright__browser_evaluate", "chrome__evaluate_script"),
    ),
    (
        "upload a file through the file picker",
        ("playwright__browser_file_upload", "chrome__upload_file"),
    ),
    (
        "go back to the previous page",
        ("playwright__browser_navigate_back", "chrome__navigate_page"),
    ),
    ("wait until the text 'Loaded' appears", _WAIT),
    (
        "resize the browser window to 375x667",
        ("playwright__browser_resize", "chrome__resize_page"),
    ),
    ("open a new browser tab", ("playwright__browser_tabs", "chrome__new_page")),
    ("close the browser", ("playwright__browser_close", "chrome__close_page")),
    ("hover over the menu", ("playwright__browser_hover", "chrome__hover")),
    ("drag the card into the done column", ("playwright__browser_drag", "chrome__drag")),
    ("choose 'Germany' from the country dropdown", ("playwright__browser_select_option",)),
    ("run a lighthouse audit for accessibility", ("chrome__lighthouse_audit",)),
    ("record a performance trace while the page loads", ("chrome__performance_start_trace",)),
    ("take a heap snapshot to find memory leaks", ("chrome__take_heapsnapshot",)),
    ("emulate a slow 3G network", ("chrome__emulate",)),
    ("what CSS styles apply to the header element?", ("chrome__get_css_styles",)),
    ("record a video of the screen", ("chrome__screencast_start",)),
    (
        "get an accessibility snapshot of the page",
        ("playwright__browser_snapshot", "chrome__take_snapshot"),
    ),
    # everything (the reference test server)
    ("echo back the message hello", ("everything__echo",)),
    ("add 3 and 4", ("everything__get-sum",)),
    ("what environment variables does the server have?", ("everything__get-env",)),
    (
        "start a long running operation with progress updates",
        ("everything__trigger-long-running-operation",),
    ),
    ("turn on simulated logging", ("everything__toggle-simulated-logging",)),
    (
        "compress a file with gzip and return it as a resource",
        ("everything__gzip-file-as-resource",),
    ),
    ("return a tiny test image", ("everything__get-tiny-image",)),
]

MULTI_STEP: list[tuple[str, tuple[Step, ...]]] = [
    (
        "look up the latest release of the repo and open an issue to track the upgrade",
        (("github__get_latest_release",), _NEW_ISSUE),
    ),
    (
        "search for open issues about memory leaks, add a comment to the top one, and label it "
        "as a bug",
        (
            ("github__search_issues",),
            ("github__add_issue_comment",),
            ("github__update_issue_labels", "github__issue_write"),
        ),
    ),
    (
        "create a branch called fix/login, commit the fix to src/login.py on GitHub, and open a "
        "pull request",
        (
            ("github__create_branch",),
            ("github__create_or_update_file", "github__push_files"),
            ("github__create_pull_request",),
        ),
    ),
    (
        "get the failing job logs of the last workflow run and re-run it",
        (("github__get_job_logs",), ("github__actions_run_trigger",)),
    ),
    (
        "read the README of the GitHub repo, fix the typo in it, and push the change",
        (("github__get_file_contents",), ("github__create_or_update_file", "github__push_files")),
    ),
    (
        "check git status, stage all modified files, and commit them with message 'wip'",
        (("git__git_status",), ("git__git_add",), ("git__git_commit",)),
    ),
    (
        "show the unstaged diff and then unstage the staged changes",
        (("git__git_diff_unstaged",), ("git__git_reset",)),
    ),
    (
        "switch to the develop branch and show the last commits",
        (("git__git_checkout",), ("git__git_log", "github__list_commits")),
    ),
    (
        "list the pods in production, show the logs of the crashing one, and restart its "
        "deployment",
        (
            ("kubernetes__kubectl_get",),
            ("kubernetes__kubectl_logs",),
            ("kubernetes__kubectl_rollout",),
        ),
    ),
    (
        "apply the new manifest, then scale the api deployment to 3 replicas",
        (("kubernetes__kubectl_apply",), ("kubernetes__kubectl_scale",)),
    ),
    (
        "install the redis helm chart and forward port 6379 to it",
        (("kubernetes__install_helm_chart",), ("kubernetes__port_forward",)),
    ),
    (
        "describe the failing pod and open a shell in it to check the config",
        (("kubernetes__kubectl_describe",), ("kubernetes__exec_in_pod",)),
    ),
    (
        "search notion for the meeting notes page, read it as markdown, and add a comment with "
        "the action items",
        (
            ("notion__API-post-search",),
            ("notion__API-retrieve-page-markdown",),
            ("notion__API-create-a-comment",),
        ),
    ),
    (
        "create a new notion page for the sprint and append a checklist of tasks to it",
        (("notion__API-post-page",), ("notion__API-patch-block-children",)),
    ),
    (
        "query the bugs database in notion and update the status property of the first item",
        (("notion__API-query-data-source",), ("notion__API-patch-page",)),
    ),
    (
        "open example.com in the browser, fill in the signup form, and take a screenshot",
        (_NAV, _FORM, _SHOT),
    ),
    (
        "go to the login page, type the password, press Enter and wait for the dashboard",
        (_NAV, _TYPE, _KEY, _WAIT),
    ),
    (
        "load the page, then list the console errors and the failed network requests",
        (_NAV, _CONSOLE, _NETWORK),
    ),
    (
        "navigate to the store page, click the add to cart button, and accept the confirmation "
        "dialog",
        (_NAV, _CLICK, _DIALOG),
    ),
    (
        "start a performance trace, reload the page, stop the trace and analyse the insights",
        (
            ("chrome__performance_start_trace",),
            ("chrome__navigate_page",),
            ("chrome__performance_stop_trace",),
            ("chrome__performance_analyze_insight",),
        ),
    ),
    (
        "run a lighthouse audit of the homepage and save the report to report.json on disk",
        (("chrome__lighthouse_audit",), ("filesystem__write_file",)),
    ),
    (
        "list the files in the logs directory, search for files named error*.log, and read the "
        "newest one",
        (
            ("filesystem__list_directory", "filesystem__list_directory_with_sizes"),
            ("filesystem__search_files",),
            _READ,
        ),
    ),
    (
        "create a backup folder and move old.db into it",
        (("filesystem__create_directory",), ("filesystem__move_file",)),
    ),
    (
        "read config.json, change the port setting in it, and show me its file info afterwards",
        (_READ, ("filesystem__edit_file",), ("filesystem__get_file_info",)),
    ),
    (
        "remember a new entity for the customer Acme and link it to the project Apollo",
        (("memory__create_entities",), ("memory__create_relations",)),
    ),
    (
        "search memory for what we know about Bob and add an observation that he moved to Berlin",
        (("memory__search_nodes",), ("memory__add_observations",)),
    ),
    (
        "read the whole knowledge graph and delete the outdated entity OldCorp",
        (("memory__read_graph",), ("memory__delete_entities",)),
    ),
    (
        "take a screenshot of the bug in the browser and file an issue on GitHub describing it",
        (_SHOT, _NEW_ISSUE),
    ),
    (
        "show the local commit history and push the changed files to GitHub in one commit",
        (("git__git_log",), ("github__push_files",)),
    ),
    (
        "find the pull request that fixes the login bug, review its changed files, and approve it",
        (
            ("github__search_pull_requests", "github__list_pull_requests"),
            ("github__pull_request_read",),
            ("github__create_pull_request_review", "github__pull_request_review_write"),
        ),
    ),
    (
        "list my notifications, open the details of the first one and dismiss it",
        (
            ("github__list_notifications",),
            ("github__get_notification_details",),
            ("github__dismiss_notification",),
        ),
    ),
    (
        "check the Dependabot alerts for the repo and open an issue for the critical one",
        (("github__list_dependabot_alerts",), _NEW_ISSUE),
    ),
    (
        "save the logs of the api pod to a file in the workspace",
        (("kubernetes__kubectl_logs",), ("filesystem__write_file",)),
    ),
    (
        "read GitHub issue 42 and create a notion page summarising it",
        (("github__issue_read",), ("notion__API-post-page",)),
    ),
]
