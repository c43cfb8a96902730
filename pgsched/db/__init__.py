"""Where the database is and how pgsched talks to it: connections, the SQL it sends, the schema it installs."""
