"""The ``--backend-config=python,<key>=<value>`` keys the backend reads (no imports: the hooks
module registers them at discovery)."""

#: The most bytes of files an EXECUTION_ENV_PATH archive may unpack to (:mod:`inferd_backend_python.env`).
MAX_BYTES_SETTING = "execution-env-max-bytes"
#: The most members it may hold.
MAX_MEMBERS_SETTING = "execution-env-max-members"
BACKEND_SETTINGS = (MAX_BYTES_SETTING, MAX_MEMBERS_SETTING)
