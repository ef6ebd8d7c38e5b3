package server

import (
	"html/template"
	"net/http"
	"strings"
)

// The sign-in page: the console's pages need the API (read) token or the admin token when
// tokens are set (auth.go). The token goes in the POST body; the answer keeps a session
// in an HttpOnly, SameSite=Strict cookie, so no token is ever in a URL, a page or script.

var signInPage = template.Must(template.New("signin").Parse(`<!doctype html>
<html lang="zh-CN">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sign in登录 · downloader下载器</title>
<link rel="stylesheet" href="/assets/console.css">
</head>
<body data-page="signin">
<header class="top"><span class="brand">downloader<small>下载器</small></span></header>
<main class="signin">
<h1>sign in<small>登录控制台</small></h1>
{{if .IsOpen}}<p class="info">No token is configured: the console is open on this address. <small>未设置令牌：控制台无需登录。</small> <a href="/">domain runtime域名运行时</a></p>
{{else}}<p class="info">The console shows crawled domains and URLs: it needs the API (read) token, or the admin token to change max_concurrent_count. <small>控制台显示已抓取的域名与地址，需要读取令牌（--api-token）；修改总并发上限需要管理令牌（--admin-token）。</small></p>
{{if .Error}}<p class="warn" id="signin-error" role="alert">{{.Error}}</p>{{end}}
<form method="post" action="/signin" id="signin-form" autocomplete="off">
  <input type="hidden" name="next" value="{{.Next}}">
  <label>token<small>令牌</small> <input type="password" name="token" id="signin-token" required autofocus autocomplete="current-password"></label>
  <button type="submit" id="signin-submit">sign in<small>登录</small></button>
</form>
<p class="info">The session lasts {{.Hours}} h in an HttpOnly cookie. <small>会话保存在 HttpOnly Cookie 中，{{.Hours}} 小时后过期；令牌不会出现在地址栏。</small></p>
{{end}}
</main>
</body>
</html>
`))

type signInView struct {
	IsOpen bool
	Error  string
	Next   string
	Hours  int
}

func (s *Server) isOpen() bool { return s.cfg.APIToken == "" && s.cfg.AdminToken == "" }

func (s *Server) handleSignInPage() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeSignIn(w, http.StatusOK, signInView{IsOpen: s.isOpen(), Next: localPath(r.URL.Query().Get("next"))})
	})
}

func (s *Server) handleSignIn() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		next := localPath(r.PostFormValue("next"))
		if s.isOpen() {
			http.Redirect(w, r, next, http.StatusSeeOther)
			return
		}
		ro := s.roleOf(strings.TrimSpace(r.PostFormValue("token")))
		if ro == roleNone {
			s.log.Warn("console sign-in refused", "remote_addr", r.RemoteAddr)
			s.writeSignIn(w, http.StatusUnauthorized, signInView{Error: "wrong token 令牌不对", Next: next})
			return
		}
		expires := s.cfg.Clock.Now().Add(SessionTTL)
		http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: s.sessionValue(ro, expires), Path: "/",
			Expires: expires, MaxAge: int(SessionTTL.Seconds()), HttpOnly: true, SameSite: http.SameSiteStrictMode,
			Secure: r.TLS != nil})
		s.log.Info("console sign-in", "role", string(ro), "remote_addr", r.RemoteAddr)
		http.Redirect(w, r, next, http.StatusSeeOther)
	})
}

func (s *Server) handleSignOut() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		http.Redirect(w, r, "/signin", http.StatusSeeOther)
	})
}

func (s *Server) writeSignIn(w http.ResponseWriter, status int, v signInView) {
	v.Hours = int(SessionTTL.Hours())
	var b strings.Builder
	if err := signInPage.Execute(&b, v); err != nil {
		s.log.Error("sign-in page", "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// localPath keeps a redirect on this service: a path of its own, never another host
// ("//host", "/\host") or scheme.
func localPath(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, `/\`) || strings.HasPrefix(p, "/signin") {
		return "/"
	}
	return p
}
