"""A Django project for the tests of pgsched.contrib.django: settings and a tasks module, as a user writes them."""
