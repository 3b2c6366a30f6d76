"""Work items, read from the world at plan time for the manifest's generators.

Like a backend's listing, reading them is an observation: it changes nothing, and a
source that cannot be read fails the plan (``WorkItemError``) rather than plan the
deletion of every VM it made. The items are then expanded, purely, by
``sand.desired.generated``. Modules: ``branches.py`` (a repository's branches over
``git ls-remote``), ``github.py`` (labelled issues and pull requests from writers),
``rest.py`` (GitHub's REST API: conditional GETs, its rate limits), ``gather.py``
(every generator's items).
"""
