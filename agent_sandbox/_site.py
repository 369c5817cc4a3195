# Written by scripts/install.sh: the admin directory of this install.
ADMIN_DIR = '/etc/as-agt'
