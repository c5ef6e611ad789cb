/*
 * inbox--1.1.0--1.2.0.sql: update from 1.1.0 to 1.2.0, literal.
 *
 * The library serves the SQL of 1.0.0, 1.1.0 and 1.2.0 through the same
 * entry points.
 */

-- complain if the script is sourced in psql rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION inbox UPDATE TO '1.2.0'" to load this file. \quit
