/* The /admin page: one self-contained HTML document (no external assets) whose script polls
 * /admin/stats every second and renders the server, scheduler and per-request tables. */
#ifndef WF_SERVER_ADMIN_PAGE_H
#define WF_SERVER_ADMIN_PAGE_H

extern const char wf_admin_page_html[];

#endif
